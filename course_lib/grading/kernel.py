"""The grading kernel: an IPython kernel started under resource limits, in an environment of the grader's.

``python .../course_lib/grading/kernel.py --memory-mb 1024 --cpu-seconds 300 -- -f CONNECTION_FILE`` sets
the limits on its own process and then becomes an ordinary ``ipykernel`` (same interpreter as the grader, so
the same torch and course_lib, whatever kernelspec a submission names). It is started as a script, not with
``-m``, so that the limits apply before anything large (``course_lib``, torch) is imported:

- ``RLIMIT_DATA`` = the memory limit: every heap and anonymous-mmap allocation counts (torch's allocator,
  NumPy, Python objects), shared libraries do not, so ``import torch`` (about 250 MB of data) still works
  under a few hundred MB while a learner's 10 GB tensor fails with an ordinary ``RuntimeError`` /
  ``MemoryError`` instead of swapping the machine. (``RLIMIT_AS`` would count torch's ~800 MB of mapped
  libraries and leave little room.)
- ``RLIMIT_CPU``: a backstop behind the grader's wall-clock limits (the kernel is killed by SIGXCPU).
- ``RLIMIT_FSIZE``: no file the kernel writes grows beyond 64 MB; ``RLIMIT_CORE`` = 0: no core dumps.

:class:`LimitedKernelManager` is the ``jupyter_client`` kernel manager that starts this module; use
:func:`kernel_manager_class` to get one bound to given limits.
"""

from __future__ import annotations

import argparse
import os
import sys

from jupyter_client.manager import AsyncKernelManager

__all__ = ["LimitedKernelManager", "kernel_manager_class", "apply_limits", "main"]

_MB = 1 << 20


def apply_limits(memory_mb: int | None, cpu_seconds: int | None, file_mb: int = 64) -> None:
    """Set the resource limits of the current process (Linux and macOS; a no-op where unsupported)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows: no rlimits, only the grader's wall-clock limits
        return

    def _set(kind: str, value: int) -> None:
        limit = getattr(resource, kind, None)
        if limit is None:
            return
        soft, hard = resource.getrlimit(limit)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(limit, (value, value if hard == resource.RLIM_INFINITY else hard))
        except (ValueError, OSError):  # pragma: no cover - a platform that refuses this limit
            pass

    if memory_mb:
        _set("RLIMIT_DATA", int(memory_mb) * _MB)
    if cpu_seconds:
        _set("RLIMIT_CPU", int(cpu_seconds))
    _set("RLIMIT_FSIZE", int(file_mb) * _MB)
    _set("RLIMIT_CORE", 0)


class LimitedKernelManager(AsyncKernelManager):
    """Starts ``python course_lib/grading/kernel.py`` with this class's limits (see the module docstring)."""

    memory_mb: int | None = 1024
    cpu_seconds: int | None = None

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = [sys.executable, os.path.abspath(__file__)]
        if self.memory_mb:
            cmd += ["--memory-mb", str(int(self.memory_mb))]
        if self.cpu_seconds:
            cmd += ["--cpu-seconds", str(int(self.cpu_seconds))]
        return cmd + ["--", "-f", os.path.realpath(self.connection_file), *(extra_arguments or [])]


def kernel_manager_class(memory_mb: int | None, cpu_seconds: int | None) -> type[LimitedKernelManager]:
    """A :class:`LimitedKernelManager` subclass bound to these limits (nbclient instantiates the class)."""
    return type("BoundLimitedKernelManager", (LimitedKernelManager,),
                {"memory_mb": memory_mb, "cpu_seconds": cpu_seconds})


def main(argv: list[str] | None = None) -> None:
    """Apply the limits, then run ipykernel with the remaining arguments."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)  # started as a script: its folder must not shadow anything in the kernel
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python course_lib/grading/kernel.py")
    parser.add_argument("--memory-mb", type=int, default=None)
    parser.add_argument("--cpu-seconds", type=int, default=None)
    args = parser.parse_args(argv)
    apply_limits(args.memory_mb, args.cpu_seconds)
    from ipykernel import kernelapp

    # IPython puts '' (the working folder, where cells may write files) first on sys.path unless told not to:
    # a learner's numpy.py there would shadow NumPy for the grader's own imports after a restart.
    kernelapp.launch_new_instance(argv=["--IPKernelApp.ignore_cwd=True", *rest])


if __name__ == "__main__":
    main()
