"""The hand-written byte-level BPE (``course_lib.data.bpe``) against Hugging Face ``tokenizers`` on the course's corpus.

Both train on the training documents of ``python_docs_corpus()`` (the running Python's documentation) with the same
settings (vocabulary ``--vocab-size``, ``min_frequency`` 2, ``<|endoftext|>`` as the one special token), then encode
the validation documents. Reported: training seconds, encoding throughput (characters per second), their ratios, and
whether the merges and the ids are equal (they must be: ``tests/data/test_bpe.py``). One run each, so a ratio on a
shared machine is indicative only; the note below the table says how busy the machine was.

Usage::

    python benchmarks/bench_bpe.py            # vocabulary 2048
    python benchmarks/bench_bpe.py --quick    # 20 documents, vocabulary 512

Writes ``benchmarks/results/bpe.md`` and prints ``RESULT`` lines for ``run_all.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402

from course_lib.data.bpe import ByteBPE  # noqa: E402
from course_lib.data.python_docs import END_OF_TEXT, python_docs_corpus  # noqa: E402
from course_lib.data.translation import learn_bpe  # noqa: E402


def timed(fn, *args):  # noqa: ANN001, ANN002, ANN201
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 training documents, vocabulary 512")
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "bpe.md")
    args = parser.parse_args()
    corpus = python_docs_corpus()
    train = corpus.train[:20] if args.quick else corpus.train
    vocab_size = 512 if args.quick else args.vocab_size
    valid = "\n".join(corpus.valid)
    busy = cpu_busy_share()

    mine, mine_train = timed(ByteBPE.train, train, vocab_size, 2, [END_OF_TEXT])
    theirs, their_train = timed(learn_bpe, train, vocab_size, 2, [END_OF_TEXT], "byte")
    mine_ids, mine_encode = timed(mine.encode, valid)
    their_ids, their_encode = timed(lambda text: theirs.encode(text).ids, valid)
    model = json.loads(theirs.to_str())["model"]
    their_merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    equal = mine.merges == their_merges and mine.vocab == theirs.get_vocab() and mine_ids == their_ids

    rows = [("training (s)", mine_train, their_train), ("encoding (s)", mine_encode, their_encode),
            ("encoding (characters / s)", len(valid) / mine_encode, len(valid) / their_encode)]
    lines = ["# Byte-level BPE: by hand against `tokenizers`", "",
             f"Training on {len(train)} documents ({sum(map(len, train)):,} characters), vocabulary {vocab_size} "
             f"({len(mine.merges)} merges); encoding the validation text ({len(valid):,} characters, "
             f"{len(mine_ids):,} tokens). One run each.", "",
             "| | course_lib.data.bpe | tokenizers | ratio |", "|---|---|---|---|"]
    lines += [f"| {name} | {a:,.3f} | {b:,.3f} | {a / b:.1f}x |" for name, a, b in rows]
    lines += ["", f"Merges, vocabulary and ids equal: {equal}.", "", markdown_machine(machine_info()), "",
              load_note(busy), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"RESULT bpe training ratio {mine_train / their_train:.1f}x, encoding ratio "
          f"{mine_encode / their_encode:.1f}x, equal {equal}")
    if not equal:
        sys.exit("bench_bpe: the hand-written BPE and tokenizers disagree")


if __name__ == "__main__":
    main()
