"""The server key that seals webhook secrets in the database (docs/security.md), kept outside it.

Where it comes from, for every process on one database (serve, worker, migrate, `outlive
secrets`), is one rule: `--secret-key-file PATH` (or `OUTLIVE_SECRET_KEY_FILE`) when given;
else `OUTLIVE_SECRET_KEY` (a key as text; `OUTLIVE_SECRET_KEY_OLD`, comma-separated, holds
older keys that still open during a rotation); else a file beside the local key file
(`outlive.db.key` → `outlive.db.secret-key`; `./outlive.secret-key` for PostgreSQL), made
mode 0600 with a new key the first time it is needed. A file holds one key per line, the
newest (which seals) first.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..client import key_file_for
from ..domain.secret_box import SecretBox, SecretKeyMissing, new_key, parse_key

if TYPE_CHECKING:
    from ..domain.quotas import Quotas
    from ..store import PostgresStore, SqliteStore

__all__ = [
    "OLD_KEYS_ENV",
    "SECRET_KEY_ENV",
    "KeySource",
    "key_source",
    "keyring",
    "open_sealed_store",
    "read_keys",
    "secret_key_file",
    "write_keys",
]

SECRET_KEY_ENV = "OUTLIVE_SECRET_KEY"
OLD_KEYS_ENV = "OUTLIVE_SECRET_KEY_OLD"

log = logging.getLogger("outlive.secrets")


def secret_key_file(db_url: str, option: str | None) -> Path:
    """`--secret-key-file`, else the local key file's name with `.secret-key` for `.key`."""
    if option:
        return Path(option)
    local = key_file_for(db_url)
    return local.with_name(local.name.removesuffix(".key") + ".secret-key")


@dataclass(frozen=True)
class KeySource:
    """Where this process's keys come from: a file (`path`) or the environment (`path` None)."""

    path: Path | None
    env_keys: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return SECRET_KEY_ENV if self.path is None else str(self.path)

    def hint(self) -> str:
        """What to do when a sealed secret names a key this process lacks."""
        if self.path is None:
            return (f"set {SECRET_KEY_ENV} (or, during a rotation, {OLD_KEYS_ENV}) to the key "
                    "that encrypted them; every process on this database needs the same key")
        return (f"give this process the key file that holds that key (--secret-key-file; "
                f"it read {self.path}) or set {SECRET_KEY_ENV} to it; every process on this "
                "database needs the same key (docs/security.md)")

    def box(self, *, create: bool = True) -> tuple[SecretBox, bool]:
        """The keyring, and whether the key file was made now (with a new key)."""
        if self.path is None:
            return SecretBox([parse_key(k) for k in self.env_keys], hint=self.hint()), False
        path = self.path
        created = create and _create(path)
        keys = read_keys(path)
        if not keys:
            raise SecretKeyMissing(f"the secret key file {path} holds no key; "
                                   + self.hint())
        return SecretBox(keys, reload=_reloader(path), hint=self.hint()), created


def key_source(db_url: str, option: str | None,
               environ: Mapping[str, str] | None = None) -> KeySource:
    """The module docstring's rule: the option, else the variable, else the default file."""
    env = os.environ if environ is None else environ
    if option or not env.get(SECRET_KEY_ENV, "").strip():
        return KeySource(secret_key_file(db_url, option))
    old = [k.strip() for k in env.get(OLD_KEYS_ENV, "").split(",") if k.strip()]
    return KeySource(None, (env[SECRET_KEY_ENV].strip(), *old))


async def open_sealed_store(url: str, source: KeySource, *, listen_url: str | None = None,
                            migrate: bool = True, quotas: Quotas | None = None
                            ) -> PostgresStore | SqliteStore:
    """`open_store` with the keyring of `source`: plain secrets are sealed and a secret
    under a key this process lacks fails the start (`keyring`). `quotas`: the server's
    (docs/quotas.md; None: the defaults)."""
    from ..store import open_store

    with keyring(source) as box:
        store = await open_store(url, migrate=migrate, listen_url=listen_url, secrets=box)
    if quotas is not None:
        store.quotas = quotas
    return store


@contextlib.contextmanager
def keyring(source: KeySource) -> Iterator[SecretBox]:
    """The keyring of `source` for the block; a key file made for it is removed again when
    the block finds the database sealed with another key (the file would only hold a key
    nothing was sealed with, and the next start would trust it)."""
    try:
        box, created = source.box()
    except ValueError as exc:
        raise SecretKeyMissing(f"{source.where}: {exc}") from None
    try:
        yield box
    except SecretKeyMissing:
        if created and source.path is not None:
            with contextlib.suppress(OSError):
                source.path.unlink()
        raise


def read_keys(path: Path) -> list[bytes]:
    """The keys in `path`, newest first (blank lines and `#` comments skipped); none when
    there is no such file. A file others can read is warned about."""
    try:
        text = path.read_text()
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        return []
    if mode & 0o077:
        log.warning("%s is readable by other users (mode %s); `chmod 600` it", path, oct(mode))
    lines = [ln.strip() for ln in text.splitlines()]
    try:
        return [parse_key(ln) for ln in lines if ln and not ln.startswith("#")]
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def write_keys(path: Path, keys: Sequence[str]) -> None:
    """Replace `path` whole (a new file 0600, renamed over it): a reader sees the old keys
    or the new ones, never half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write("".join(k + "\n" for k in keys))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _create(path: Path) -> bool:
    """Make `path` with a new key unless it exists (or is empty: a cut first write). Made
    under a temporary name and linked in, so two processes starting together agree on one
    key, and the file is 0600 from its first byte."""
    if path.is_file() and path.stat().st_size > 0:
        return False
    if not path.parent.is_dir():
        raise SecretKeyMissing(f"cannot make the secret key file {path}: the folder "
                               f"{path.parent} does not exist (create it, or give "
                               "--secret-key-file)")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(new_key() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            if path.stat().st_size > 0:
                return False  # another process made it first: its key it is
            os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _reloader(path: Path) -> Callable[[], list[bytes]]:
    """The keys of `path` again when the file changed (an `outlive secrets rotate` by
    another process), read only then."""
    stamp: tuple[int, int, int] | None = None
    keys: list[bytes] = []

    def reload() -> list[bytes]:
        nonlocal stamp, keys
        st = path.stat()
        now = (st.st_ino, st.st_mtime_ns, st.st_size)
        if now != stamp:
            stamp, keys = now, read_keys(path)
        return keys

    return reload
