"""Store the notebooks with the kernel metadata JupyterLab writes, so that a notebook opens unmodified.

JupyterLab 4.6 sets a notebook's ``kernelspec`` and ``language_info`` from the kernel it starts and marks the
notebook modified when they differ from the stored ones; the course's notebooks stored ``"Python 3"`` and
``{"name": "python"}`` and so opened modified. This script writes
``course_lib.exercises.authoring.kernel_metadata()`` (this environment's ``python3`` kernelspec and ipykernel's
``language_info``, the Python version included) into every notebook's metadata and touches nothing else: the
cells, and every other metadata key, stay byte for byte. ``tests/notebooks/test_notebook_metadata.py`` checks the
result::

    python tools/notebook_metadata.py            # rewrite notebooks/*.ipynb
    python tools/notebook_metadata.py --check    # only compare; exit 1 and name the notebooks that differ
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from course_lib.exercises.authoring import kernel_metadata

ROOT = Path(__file__).resolve().parents[1]


def with_kernel_metadata(text: str, wanted: dict[str, dict]) -> str:
    """The notebook's JSON text with ``wanted`` (kernelspec, language_info) as its metadata's keys.

    Written as nbformat writes (one-space indent, sorted keys, a final newline), which is how the notebooks are
    stored, so that the diff is the metadata alone.
    """
    nb = json.loads(text)
    nb["metadata"].update(wanted)
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a notebook differs")
    args = parser.parse_args(argv)
    wanted = kernel_metadata()
    differ = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        new = with_kernel_metadata(text, wanted)
        if new != text:
            differ.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    verb = "differ from" if args.check else "rewritten with"
    print(f"{len(differ)} notebooks {verb} JupyterLab's kernel metadata {json.dumps(wanted)}: {differ}")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
