"""The operating-system sandbox: one bubblewrap (``bwrap``) container per run of a submission's code.

:func:`command` builds the ``bwrap`` command line: every namespace unshared (no network; its own PID namespace
whose init is the runner itself, ``--as-pid-1``: when it ends, or is killed, the kernel kills every process
the learner started, detached or not, and the grader is accounted its CPU time; ``--die-with-parent`` so it
dies with the grader), an unprivileged uid/gid (65534), all capabilities dropped, a new session (no terminal
injection), the system (``/usr``...) and the Python installation read-only, ``/etc``, ``/home``, ``/root``, the
repository and every other submission absent, Python at neutral paths (:func:`python_layout`), a private
size-limited ``/tmp`` (the working folder) and ``/dev/shm``, and three read-only folders of the grader's:
``/grader/lib`` (the course_lib copy with the references withheld, :mod:`course_lib.grading.sandbox.libcopy`),
``/grader/job`` (this submission's cells and its exercise's hidden inputs, nothing else) and ``/grader/fonts``
(Matplotlib's font list, :func:`font_list`). The resource limits
are set by the runner itself (:mod:`course_lib.grading.sandbox.sandbox_main`) before any learner code runs.

:class:`SandboxRun` starts it and reads the runner's frames from a pipe with hard limits on their size, in a
thread, so that the grader can time each exercise and kill the whole container.

Without bubblewrap (``--unsafe-no-sandbox``) the same runner is started as a plain process: no isolation.
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxUnavailable", "probe", "command", "SandboxRun", "Frame", "INSTALL_HINT", "UID"]

UID = 65534
INSTALL_HINT = ("course-grade runs every submission in a bubblewrap sandbox: install it (Debian/Ubuntu: "
                "`sudo apt-get install bubblewrap`, Fedora: `sudo dnf install bubblewrap`) on Linux with user "
                "namespaces enabled, or pass --unsafe-no-sandbox to grade without one (only for trusted code)")
LIB, JOB, WORK, PYTHON = "/grader/lib", "/grader/job", "/tmp", "/grader/python"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here."""


def probe() -> None:
    """Raise :class:`SandboxUnavailable` (with what to install) unless a bwrap sandbox starts here."""
    if not sys.platform.startswith("linux") or shutil.which("bwrap") is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) was not found. {INSTALL_HINT}")
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--uid", str(UID), "--gid", str(UID),
           *_system_mounts(), "--", "/bin/true"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SandboxUnavailable(f"bwrap could not start ({err}). {INSTALL_HINT}") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise SandboxUnavailable(f"bwrap cannot create its namespaces here ({why}). {INSTALL_HINT}")


def _system_mounts() -> list[str]:
    """Read-only system folders (or the symlinks a merged-/usr system has)."""
    args: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def python_roots() -> list[str]:
    """The folders of this Python installation (virtual environment and base), outside the system's."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(os.path.realpath(sys.executable)).parent.parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        roots.add(sysconfig.get_paths()[key])
    kept = sorted(r for r in roots if r and os.path.isdir(r) and not r.startswith("/usr/"))
    return [r for r in kept if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in kept)]


@dataclass(frozen=True)
class PythonLayout:
    """Where the sandbox finds Python: folders to bind ``(host, inside)``, the interpreter's path inside, the
    package folders its runner adds (``site.addsitedir``), the environment the interpreter needs, and every
    package folder ``(host, inside)`` whose contents the sandbox shows only in part (:func:`package_mounts`)."""

    binds: list[tuple[str, str]]
    executable: str
    site_dirs: list[str]
    env: dict[str, str]
    packages: list[tuple[str, str]]


def host_paths_layout() -> PythonLayout:
    """The base installation bound at its own paths, for one that cannot move (see below), and a virtual
    environment's package folders at neutral paths (``/grader/python/site-packages-N``).

    The environment's own folder is not bound, and the interpreter is the base's real file (what the environment's
    ``bin/python`` links to; the runner adds the package folders itself, so ``pyvenv.cfg`` is not needed). So
    nothing inside names where the environment lives on the host, as with :func:`python_layout`'s neutral base.
    """
    venv = os.path.realpath(sys.prefix) if sys.prefix != sys.base_prefix else None

    def in_venv(path: str) -> bool:
        return venv is not None and (path == venv or path.startswith(venv.rstrip("/") + "/"))

    site_dirs = sorted({os.path.realpath(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")})
    packages = [(d, f"{PYTHON}/site-packages-{number}" if in_venv(d) else d) for number, d in enumerate(site_dirs)]
    packages += [(d, d) for d in _base_package_dirs() if os.path.isdir(d) and d not in site_dirs]
    roots = [r for r in python_roots() if not in_venv(os.path.realpath(r))]
    executable = os.path.realpath(sys.executable) if venv is not None else sys.executable
    return PythonLayout([(r, r) for r in roots], executable, [inside for _, inside in packages[:len(site_dirs)]], {},
                        sorted(p for p in packages if os.path.isdir(p[0])))


def _base_package_dirs() -> list[str]:
    """The base installation's own package folders: hidden from a virtual environment's interpreter, but on
    the disk the sandbox binds (``pip install --user`` aside, where a machine-wide ``transformers`` would be)."""
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    return sorted({os.path.realpath(sysconfig.get_paths(vars=base)[key]) for key in ("purelib", "platlib")})


def python_layout() -> PythonLayout:
    """Python inside the sandbox at neutral paths: the base installation at ``/grader/python/base``, the
    package folders (a virtual environment's ``site-packages``) at ``/grader/python/site-packages-N``.

    Inside, nothing then names where the grader's files live on the host (the user, the checkout, the
    environment's folder) but ``/proc/self/mountinfo``'s source column, which the kernel writes and no
    mount can change (``docs/grading.md``). CPython finds its standard library from the interpreter's own
    location, so the base moves as a whole; a shared ``libpython`` found through an absolute run path is
    found through ``LD_LIBRARY_PATH`` instead. An interpreter that is not inside its base (a system Python
    under ``/usr``, or an unusual layout) keeps the host paths.
    """
    base = os.path.realpath(sys.base_prefix)
    interpreter = os.path.realpath(sys.executable)
    if base.startswith("/usr") or not interpreter.startswith(base.rstrip("/") + "/"):
        return host_paths_layout()
    inside_base = f"{PYTHON}/base"
    binds, sites, packages = [(base, inside_base)], [], []
    for number, site_dir in enumerate(sorted({os.path.realpath(sysconfig.get_paths()[key])
                                              for key in ("purelib", "platlib")})):
        if site_dir.startswith(base.rstrip("/") + "/"):  # no virtual environment: the base holds the packages
            sites.append(inside_base + site_dir[len(base):])
        else:
            sites.append(f"{PYTHON}/site-packages-{number}")
        packages.append((site_dir, sites[-1]))
    for site_dir in _base_package_dirs():  # a virtual environment's base: its packages shown in part too
        if site_dir.startswith(base.rstrip("/") + "/") and os.path.isdir(site_dir) \
                and site_dir not in {host for host, _ in packages}:
            packages.append((site_dir, inside_base + site_dir[len(base):]))
    env = {"LD_LIBRARY_PATH": f"{inside_base}/lib"} if os.path.isdir(os.path.join(base, "lib")) else {}
    return PythonLayout(binds, inside_base + interpreter[len(base):], sites, env, packages)


def package_mounts(packages: list[tuple[str, str]], extra_modules: tuple[str, ...] = ()) -> list[str]:
    """bwrap arguments that show each package folder with only the packages the course needs in it: an empty,
    read-only tmpfs at its place, and in it, bound read-only one by one, the entries of the distributions that
    :func:`course_lib.grading.sandbox.packages.visible_entries` names. Any other library installed there (Hugging
    Face's ``transformers``, whose functions are notebook 14's answers) is absent from the sandbox."""
    from .packages import visible_entries

    args: list[str] = []
    for host, inside in packages:
        args += ["--tmpfs", inside]
        for entry in visible_entries(host, extra_modules):
            args += ["--ro-bind", os.path.join(host, entry), f"{inside}/{entry}"]
        args += ["--remount-ro", inside]
    return args


def _masks(roots: list[str], packages: list[tuple[str, str]] = ()) -> list[str]:
    """An empty tmpfs over any real ``course_lib`` that a mounted root would otherwise show (one installed in a
    package folder is absent already: :func:`package_mounts` shows only the course's dependencies there)."""
    import course_lib

    real = str(Path(course_lib.__file__).resolve().parent)
    if any(real.startswith(host.rstrip("/") + "/") for host, _ in packages):
        return []
    for host, inside in roots:
        if real.startswith(host.rstrip("/") + "/"):
            return ["--tmpfs", inside + real[len(host):]]
    return ["--tmpfs", real] if real.startswith("/usr/") else []


def _container(layout: PythonLayout, disk_mb: int, extra_modules: tuple[str, ...]) -> list[str]:
    """The bwrap arguments every container of the grader's shares: namespaces, user, the system and Python
    read-only, the course's packages only, a private size-limited working folder."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
            "--uid", str(UID), "--gid", str(UID), "--hostname", "sandbox", "--clearenv", *_system_mounts()]
    # The private /tmp first: a Python installation that lives under /tmp (a CI job's virtual environment)
    # is then bound on top of it, read-only, instead of being hidden by it.
    args += ["--size", str(disk_mb << 20), "--tmpfs", WORK]
    for host, inside in layout.binds:
        args += ["--ro-bind", host, inside]
    args += package_mounts(layout.packages, extra_modules)
    return args + _masks(layout.binds, layout.packages)


def _environment(layout: PythonLayout, **extra: str) -> list[str]:
    """bwrap's ``--setenv`` arguments: the only environment a container has (``--clearenv``), ``extra`` on top."""
    env = {"PATH": "/usr/bin:/bin", "HOME": WORK, "TMPDIR": WORK, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "MPLBACKEND": "Agg", "MPLCONFIGDIR": WORK, "COURSE_GRADE_SITE": os.pathsep.join(layout.site_dirs),
           **layout.env, **extra}
    return [arg for key, value in env.items() for arg in ("--setenv", key, value)]


#: The folder of Matplotlib's font list, bound read-only into every sandbox (:func:`font_list`).
FONTS = "/grader/fonts"
_MAKE_FONT_LIST = ("import os, site\n"
                   "for folder in os.environ['COURSE_GRADE_SITE'].split(os.pathsep):\n    site.addsitedir(folder)\n"
                   "from matplotlib import font_manager\n")


@functools.lru_cache(maxsize=8)
def font_list(extra_modules: tuple[str, ...] = ()) -> str | None:
    """A host folder holding Matplotlib's font list as the sandbox sees the fonts (their paths inside), or None.

    A notebook's setup imports (its figures module) load Matplotlib's font manager, which on a fresh cache opens
    every font file the system has: 0.25 s of each sandbox's start here, seconds on a desktop with many fonts.
    So the grader makes the list once per process, in a container of its own with the runner's mounts and no
    learner code (Matplotlib's own code writes it), and each runner starts from a copy of it
    (:func:`course_lib.grading.sandbox.sandbox_main.seed_font_list`). Without it a runner makes its own, as
    before."""
    from .scratch import scratch_folder

    layout = python_layout()
    folder = scratch_folder("fonts")
    atexit.register(shutil.rmtree, folder, True)
    args = [*_container(layout, 64, extra_modules), "--bind", str(folder), FONTS, "--proc", "/proc",
            "--dev", "/dev", "--remount-ro", "/", "--chdir", WORK, *_environment(layout, MPLCONFIGDIR=FONTS),
            "--", layout.executable, "-P", "-s", "-S", "-c", _MAKE_FONT_LIST]
    try:
        done = subprocess.run(args, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    made = done.returncode == 0 and any(name.startswith("fontlist-") for name in os.listdir(folder))
    return str(folder) if made else None


def command(lib: Path, job: Path, disk_mb: int, channel: int, requests: int,
            extra_modules: tuple[str, ...] = ()) -> list[str]:
    """The bwrap command line that runs the sandbox's runner (see the module docstring); ``extra_modules``:
    the instructor's ``--allow-module`` names, whose distributions the sandbox then shows too."""
    layout = python_layout()
    fonts = font_list(tuple(sorted(extra_modules)))
    args = _container(layout, disk_mb, extra_modules)
    args += ["--ro-bind", str(lib), LIB, "--ro-bind", str(job), JOB, "--proc", "/proc", "--dev", "/dev",
             "--size", str(1 << 20), "--tmpfs", "/dev/shm"]
    if fonts is not None:
        args += ["--ro-bind", fonts, FONTS]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORK]
    args += _environment(layout, PYTHONPATH=LIB, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                         COURSE_DEVICE="cpu", COURSE_THREADS="1", COURSE_GRADE_CHANNEL=str(channel),
                         COURSE_GRADE_REQUESTS=str(requests), **({"COURSE_GRADE_FONTS": FONTS} if fonts else {}))
    # -S: no site module at start-up (it would add the base's own packages, which a virtual environment
    # hides); the runner adds the environment's package folders itself (COURSE_GRADE_SITE).
    return args + ["--", layout.executable, "-P", "-s", "-S", f"{LIB}/course_lib/grading/sandbox/sandbox_main.py", JOB]


def unsandboxed_command(lib: Path, job: Path, channel: int, requests: int) -> list[str]:
    """The runner as a plain process (``--unsafe-no-sandbox``): the same program, no isolation at all."""
    return ["env", f"PYTHONPATH={lib}", f"COURSE_GRADE_CHANNEL={channel}", f"COURSE_GRADE_REQUESTS={requests}",
            sys.executable, "-P", "-s", str(lib / "course_lib" / "grading" / "sandbox" / "sandbox_main.py"), str(job)]


@dataclass
class Frame:
    """One message from the runner: its JSON header and the bytes of its ``.npz`` (may be empty)."""

    header: bytes
    arrays: bytes


class SandboxRun:
    """A started sandbox and the frames it sends (at most ``max_frame`` bytes each, ``max_total`` in all)."""

    EOF = object()

    def __init__(self, build: callable, max_frame: int, max_total: int, work: Path, keep: int | None = None) -> None:
        read_end, write_end = os.pipe()
        self.frames: queue.Queue = queue.Queue()
        self.problem = ""
        self.max_frame, self.max_total = max_frame, max_total
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COURSE_GRADE_CHANNEL": str(write_end),
               "HOME": str(work), "TMPDIR": str(work), "OMP_NUM_THREADS": "1", "COURSE_THREADS": "1", "PYTHONPATH": "",
               "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", "MPLBACKEND": "Agg"}
        debug = os.environ.get("COURSE_GRADE_DEBUG")
        try:
            passed = (write_end,) if keep is None else (write_end, keep)  # keep: the grader's request pipe
            self.proc = subprocess.Popen(build(write_end), stdin=subprocess.DEVNULL, pass_fds=passed,
                                         stdout=None if debug else subprocess.DEVNULL,
                                         stderr=None if debug else subprocess.DEVNULL,
                                         cwd=str(work), env=env, start_new_session=True)
        finally:
            os.close(write_end)
        self._reader = threading.Thread(target=self._read, args=(read_end,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        total = 0
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while True:
                size = _read_exact(pipe, 8)
                if size is None:
                    break
                (length,) = struct.unpack(">Q", size)
                total += length
                if length > self.max_frame or total > self.max_total or length < 4:
                    self.problem = (f"the sandbox sent {length} bytes at once ({total} in all), over the grader's "
                                    f"limit of {self.max_frame} per message")
                    self.kill()
                    break
                payload = _read_exact(pipe, length)
                if payload is None:
                    break
                (json_length,) = struct.unpack(">I", payload[:4])
                self.frames.put(Frame(payload[4:4 + json_length], payload[4 + json_length:]))
        self.frames.put(self.EOF)

    def next(self, timeout: float) -> object:
        """The next frame, :attr:`EOF` when the sandbox is gone, or None after ``timeout`` seconds."""
        try:
            return self.frames.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def kill(self) -> None:
        """Stop the whole container (bwrap's death takes every process of its PID namespace with it)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            pass

    def close(self, grace: float = 0.0) -> None:
        """Let the sandbox end by itself for ``grace`` seconds, then kill it; wait for it and the reader."""
        try:
            self.proc.wait(timeout=grace) if grace > 0 else None
        except subprocess.TimeoutExpired:
            pass
        self.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass
        self._reader.join(timeout=30)


def _read_exact(pipe: object, n: int) -> bytes | None:
    """Exactly ``n`` bytes from ``pipe``, or None at end of file."""
    chunks, got = [], 0
    while got < n:
        chunk = pipe.read(min(n - got, 1 << 20))  # type: ignore[attr-defined]
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
