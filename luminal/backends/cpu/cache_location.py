"""Where the kernel cache lives, and whether that place can be trusted with code we dlopen.

Trust model: luminal loads a cached shared object only from a directory that the user
running it owns and that nobody else can write (a directory writable by group or others, or
owned by another user, could hold anyone's code, and so could a manifest in it). Every
directory luminal creates or names itself is `0700` whatever the umask; every file `0600`.

- `$LUMINAL_CACHE_DIR` owned by another user or writable by group/others is ignored (one
  warning) and the default place is used; one of the user's own that others cannot write
  (say `0755`) is used as it is, never chmodded.
- The default place (`$XDG_CACHE_HOME/luminal`, else `~/.cache/luminal`) and the
  `cpu-kernels` folder: owned by another user raises `CompileError` naming the path and the
  fix; ours but writable by group/others is replaced by a fresh private directory (its
  contents cannot be trusted, so they are discarded; one warning); ours and unshared is
  made `0700`.
- A place that cannot be used at all (read-only file system, `HOME` that cannot be
  created, a regular file in the way) falls back to a private temporary directory for this
  process, removed at exit (one warning).

The answer is memoised per environment (`LUMINAL_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`), so a
compile pays two `stat` calls to re-check it; `reset()` forgets it (tests).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import stat
import tempfile
import threading
import warnings
from pathlib import Path

from luminal.errors import CompileError

ENVIRONMENT_VARIABLE = "LUMINAL_CACHE_DIR"
KERNELS = "cpu-kernels"
PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600
SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


class CacheWarning(UserWarning):
    """The kernel cache is not where it was asked to be (ignored, replaced or temporary)."""


class _Untrusted(Exception):
    """A directory that others could have written code into."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path} is {why}")
        self.path = path
        self.why = why


class _Foreign(_Untrusted):
    """A directory owned by another user: never used, never modified."""


class _Shared(_Untrusted):
    """A directory of ours that group or others can write: its contents are not ours."""


_lock = threading.Lock()
_resolved: dict[tuple[str | None, ...], Path] = {}
_temporary: Path | None = None


def cache_root() -> Path:
    """The verified private cache root (created on first use); see the module docstring."""
    key = tuple(os.environ.get(name) for name in (ENVIRONMENT_VARIABLE, "XDG_CACHE_HOME", "HOME"))
    with _lock:
        root = _resolved.get(key)
    if root is not None and is_private(root) and is_private(root / KERNELS):
        return root
    root = _resolve()
    with _lock:
        _resolved[key] = root
    return root


def cache_dir() -> Path:
    """Where compiled objects and libraries live: `cpu-kernels` under the root."""
    return cache_root() / KERNELS


def reset() -> None:
    """Forget where the cache is, so the next compile resolves (and warns) again."""
    with _lock:
        _resolved.clear()


def default_root() -> Path:
    """`$XDG_CACHE_HOME/luminal`, else `~/.cache/luminal`."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base.absolute() / "luminal"


# ------------------------------------------------------------------------------ resolving
def _resolve() -> Path:
    explicit = os.environ.get(ENVIRONMENT_VARIABLE)
    if explicit:
        path = Path(explicit).expanduser().absolute()
        try:
            return _usable(path, ours=False)
        except _Untrusted as why:
            _warn(
                f"ignoring {ENVIRONMENT_VARIABLE}={path}: {why}, so code in it could be anyone's; "
                f"using {_default_or_home()} instead (fix: point {ENVIRONMENT_VARIABLE} at a "
                f"directory you own with mode 0700)"
            )
        except OSError as error:
            return _fallback(path, error)
    try:
        path = default_root()
    except RuntimeError as error:  # no HOME and no passwd entry
        return _fallback(Path("~/.cache/luminal"), OSError(str(error)))
    try:
        return _usable(path, ours=True)
    except _Untrusted as why:
        raise CompileError(
            f"the luminal kernel cache cannot be trusted: {why}; luminal loads compiled code only "
            f"from a directory you own that nobody else can write. Fix: remove it "
            f"(rm -rf '{why.path}') or set {ENVIRONMENT_VARIABLE} to a directory you own with "
            f"mode 0700."
        ) from None
    except OSError as error:
        return _fallback(path, error)


def _default_or_home() -> str:
    try:
        return str(default_root())
    except RuntimeError:
        return "the default cache"


def _usable(root: Path, ours: bool) -> Path:
    """`root` and its kernels folder as trusted directories we can write, or an exception:
    `_Untrusted` for untrusted ones, OSError for unusable ones. `ours`: luminal named the
    root (the default place), so it may be tightened or replaced; a directory the user named
    is never modified. The kernels folder is always luminal's."""
    for directory, owned in ((root, ours), (root / KERNELS, True)):
        _trusted_directory(directory, owned)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable", str(directory))
    return root


def _trusted_directory(path: Path, owned: bool) -> None:
    """Create `path` (and missing parents) `0700`, or check the existing one. A directory
    luminal owns is made `0700` when it is not, and replaced when group/others could write
    it; one the user named is only checked."""
    _make_private(path)
    try:
        _check(path)
    except _Shared as shared:
        if not owned:
            raise
        _replace(path, shared.why)
    if owned and stat.S_IMODE(os.stat(path).st_mode) != PRIVATE_DIRECTORY:
        os.chmod(path, PRIVATE_DIRECTORY)


def _make_private(path: Path) -> None:
    missing = []
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIRECTORY)
        except FileExistsError:  # made meanwhile by another process: checked below
            continue
        os.chmod(directory, PRIVATE_DIRECTORY)  # the umask may have taken owner bits away


def _check(path: Path) -> None:
    """Raise unless `path` is a directory we own that group/others cannot write."""
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(20, "a file is in the way, not a directory", str(path))
    if info.st_uid != os.geteuid():
        raise _Foreign(path, f"owned by uid {info.st_uid}, not by you (uid {os.geteuid()})")
    if info.st_mode & SHARED_WRITE:
        mode = stat.S_IMODE(info.st_mode)
        raise _Shared(path, f"writable by group or others (mode {mode:04o})")


def is_private(path: Path) -> bool:
    """A directory we own that group/others cannot write: one whose contents are ours."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and not info.st_mode & SHARED_WRITE
    )


def _replace(path: Path, why: str) -> None:
    """Move a shared directory of ours aside (atomic: nothing more lands in the new one),
    delete it, and create a fresh private one in its place. (Two processes replacing the
    same directory at once may make one of them fail once; it is a one-time migration.)"""
    aside = path.with_name(f"{path.name}.untrusted-{secrets.token_hex(4)}")
    os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)
    _make_private(path)
    _check(path)
    _warn(
        f"the luminal kernel cache {path} was {why}, so its contents could be anyone's: "
        f"they were discarded and the directory recreated private (0700)"
    )


def _fallback(wanted: Path, error: OSError) -> Path:
    """This process's private temporary cache (created once, removed at exit)."""
    global _temporary
    reason = error.strerror or str(error)
    with _lock:
        if _temporary is None or not is_private(_temporary / KERNELS):
            try:
                _temporary = Path(tempfile.mkdtemp(prefix="luminal-cache-"))
                os.mkdir(_temporary / KERNELS, PRIVATE_DIRECTORY)
            except OSError as second:
                raise CompileError(
                    f"no usable kernel cache: {wanted} cannot be used ({reason}) and no private "
                    f"temporary directory could be made ({second}); set {ENVIRONMENT_VARIABLE} "
                    f"to a writable directory"
                ) from error
            atexit.register(shutil.rmtree, _temporary, ignore_errors=True)
        temporary = _temporary
    _warn(
        f"the luminal kernel cache {wanted} cannot be used ({reason}); compiled kernels go to "
        f"the private temporary directory {temporary} and are removed when this process exits "
        f"(fix: set {ENVIRONMENT_VARIABLE} to a writable directory you own)"
    )
    return temporary


def _warn(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=2)
