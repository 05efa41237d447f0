"""Where durable files live: a local directory or an object-storage prefix (`s3://`, `gs://`, `abfs://`), behind one
small interface (`Storage`), so that run directories (draws, checkpoints) and uploaded data sets can sit on object
storage that every replica of the service (and any machine resuming a run) reaches.

Both kinds write whole files atomically (readers see all of a file or none of it): a local file is written under a
temporary name, fsynced and renamed; an object is uploaded in one request, which object stores commit whole.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import threading
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from .objectstore import ObjectURI, filesystem, is_uri, parse_uri

#: CPython 3.11 builds syntax trees with state its threads share: two threads parsing at once can fail with
#: "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). numpy parses every .npy header
#: with `ast.literal_eval`, and the service reads draw files from many threads at once (a draws stream whose read
#: failed so ended early under load), so every .npy and .npz read of raysampler's parses its headers with this lock
#: held (`read_npy_header`, used by `read_npy` and `read_npz`; the data are read after it is released).
NPY_LOCK = threading.Lock()

__all__ = [
    "LocalStorage",
    "ObjectStorage",
    "Storage",
    "read_location",
    "read_npy",
    "read_npy_header",
    "read_npz",
    "remove_location",
    "storage_at",
]


_NPY_PIECE = 1 << 20  # bytes a `read_npy` read asks for at a time


def read_npy_header(f: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The (shape, Fortran order, dtype) of an .npy stream whose magic string (`version`) was just read, parsed with
    `NPY_LOCK` held; the stream is left at the data."""
    with NPY_LOCK:
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        return np.lib.format.read_array_header_2_0(f)


def read_npy(f: IO[bytes]) -> np.ndarray:
    """One .npy stream as a new array: its header parsed with `NPY_LOCK` held, its data read after, so that a large
    array does not hold up other threads' reads. Object arrays are refused (they would need pickle)."""
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):  # 3.0 (utf-8 field names; raysampler writes none): numpy's reader, whole
        f.seek(0)
        with NPY_LOCK:
            return np.lib.format.read_array(f, allow_pickle=False)
    shape, fortran, dtype = read_npy_header(f, version)
    if dtype.hasobject:
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    out = np.empty(math.prod(shape), dtype=dtype)
    buf, got = out.view(np.uint8).data, 0
    while got < buf.nbytes:  # in pieces, as numpy does: one read of it all would build (and copy) a second array
        n = cast(io.BufferedIOBase, f).readinto(buf[got : got + _NPY_PIECE])  # BytesIO, zip members: buffered
        if not n:
            raise EOFError(f"the .npy data end after {got} of {buf.nbytes} bytes")
        got += n
    return out.reshape(shape[::-1]).T if fortran else out.reshape(shape)


def read_npz(source: bytes | str | os.PathLike, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive (its bytes or its path) by name, each read by `read_npy`; `names`: only those
    (absent ones are left out). zipfile.BadZipFile if it is no zip archive."""
    with zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source) as z:
        members = [m for m in z.namelist() if m.endswith(".npy")]
        out = {}
        for m in members:
            if names is None or m[:-4] in names:
                with z.open(m) as f:
                    out[m[:-4]] = read_npy(f)
        return out


class Storage(ABC):
    """Files below one root, named by '/'-separated relative names."""

    @property
    @abstractmethod
    def location(self) -> str:
        """The root as a path or URI (what `storage_at` takes back)."""

    @abstractmethod
    def child(self, *names: str) -> Storage:
        """The storage rooted `names` below this one."""

    @abstractmethod
    def write(self, name: str, data: bytes) -> None:
        """Store `data` as `name`, atomically and durably (replacing any file of that name)."""

    @abstractmethod
    def read(self, name: str) -> bytes:
        """The bytes of `name`; FileNotFoundError if there is none."""

    @abstractmethod
    def exists(self, name: str) -> bool: ...

    @abstractmethod
    def list(self, folder: str = "") -> list[str]:
        """Names of the files directly in `folder` (not below it; empty if there is no such folder)."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Remove `name` (no error if it is gone)."""

    @abstractmethod
    def remove_all(self) -> None:
        """Remove everything below the root."""

    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes of every file below the root."""

    def array(self, name: str) -> np.ndarray:
        """The .npy file `name` as an array (memory-mapped where the file is local)."""
        return read_npy(io.BytesIO(self.read(name)))

    def location_of(self, name: str) -> str:
        """The path or URI of `name` (what `read_location` takes)."""
        return self.location.rstrip("/") + "/" + name

    def check(self) -> None:
        """Raise OSError with the reason if the root cannot be listed (unreachable store, no permission)."""
        self.list()

    def present(self) -> bool:
        """Whether anything is stored at the root (a local folder: whether it exists)."""
        return bool(self.list()) or any(True for _ in self.list("draws"))


class LocalStorage(Storage):
    """A directory on this machine (created on first write)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    @property
    def location(self) -> str:
        return str(self.root)

    def child(self, *names: str) -> LocalStorage:
        return LocalStorage(self.root.joinpath(*names))

    def write(self, name: str, data: bytes) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def read(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def array(self, name: str) -> np.ndarray:
        with NPY_LOCK:  # parses the header only: the data stay mapped
            return np.load(self.root / name, mmap_mode="r")

    def present(self) -> bool:
        return self.root.is_dir()

    def exists(self, name: str) -> bool:
        return (self.root / name).is_file()

    def list(self, folder: str = "") -> list[str]:
        path = self.root / folder
        if not path.is_dir():
            return []
        return [p.name for p in path.iterdir() if p.is_file()]

    def remove(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    def remove_all(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def size_bytes(self) -> int:
        total = 0
        for folder, _, names in os.walk(self.root):
            for n in names:
                try:
                    total += os.stat(os.path.join(folder, n)).st_size
                except OSError:
                    pass  # removed meanwhile
        return total

    def check(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not os.access(self.root, os.W_OK):
            raise PermissionError(f"{self.root} is not writable")


class ObjectStorage(Storage):
    """A prefix in an object store, reached through `pyarrow.fs` with this process's credentials."""

    def __init__(self, uri: ObjectURI, fs: Any = None) -> None:
        self.uri = uri
        self._fs = fs

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs = filesystem(self.uri)
        return self._fs

    @property
    def location(self) -> str:
        return str(self.uri).rstrip("/") + "/"

    def child(self, *names: str) -> ObjectStorage:
        return ObjectStorage(self.uri.child(*names), self._fs)

    def _path(self, name: str = "") -> str:
        return "/".join(p for p in (self.uri.fs_path, name.strip("/")) if p)

    def write(self, name: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._path(name)) as out:  # one upload: the store commits it whole
            out.write(data)

    def read(self, name: str) -> bytes:
        import pyarrow.fs as pafs

        path = self._path(name)
        try:
            with self.fs.open_input_file(path) as f:
                return bytes(f.read())
        except (FileNotFoundError, OSError) as exc:
            if isinstance(exc, FileNotFoundError) or self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                raise FileNotFoundError(f"{self.location}{name} does not exist") from None
            raise

    def exists(self, name: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(self._path(name)).type == pafs.FileType.File)

    def list(self, folder: str = "") -> list[str]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self._path(folder), recursive=False, allow_not_found=True))
        return [i.base_name for i in infos if i.type == pafs.FileType.File]

    def remove(self, name: str) -> None:
        try:
            self.fs.delete_file(self._path(name))
        except FileNotFoundError:
            pass

    def remove_all(self) -> None:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self._path(), recursive=True, allow_not_found=True))
        for info in infos:
            if info.type == pafs.FileType.File:
                try:
                    self.fs.delete_file(info.path)
                except FileNotFoundError:
                    pass

    def size_bytes(self) -> int:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self._path(), recursive=True, allow_not_found=True))
        return sum(int(i.size or 0) for i in infos if i.type == pafs.FileType.File)


def storage_at(location: str | os.PathLike) -> Storage:
    """The storage rooted at a local path or an object-storage URI (ValueError naming the rule for a bad URI)."""
    text = os.fspath(location)
    if is_uri(text):
        return ObjectStorage(parse_uri(text))
    return LocalStorage(text)


def _split(location: str) -> tuple[Storage, str]:
    parent, _, name = location.rstrip("/").rpartition("/")
    return storage_at(parent + "/" if is_uri(location) else parent), name


def read_location(location: str) -> bytes:
    """The bytes of the file at a path or URI (`Storage.location_of`); FileNotFoundError if absent."""
    where, name = _split(location)
    return where.read(name)


def remove_location(location: str) -> None:
    """Remove the file at a path or URI (no error if it is gone)."""
    where, name = _split(location)
    where.remove(name)
