"""Artifact stores: where pool snapshots, checkpoints and reports are kept and shared.

`open_store(url)` gives a folder for a path (the default, `base.artifact_store: artifacts`) or
an S3 bucket for `s3://bucket/prefix`. Both hold files under `/`-separated keys:

    store = open_store("s3://team-bucket/acesql", endpoint_url="http://127.0.0.1:9000")
    store.upload("results/metrics.json", "runs/42/metrics.json")
    store.upload_dir("models/grpo/checkpoint-80", "runs/42/checkpoint-80")
    store.download_dir("runs/42/checkpoint-80", "models/resumed")

Every upload records the file's SHA-256 (S3: the object's metadata `sha256`; a folder: a
sidecar under `.sha256/`) and every download is checked against it. A download lands in a
temporary file next to its destination, renamed into place only once verified, so a mismatch
raises `StorageError` and leaves nothing behind. S3's own ETag is no content hash once an upload
is multipart, hence ours. Objects written by other tools carry no checksum and are not verified.

S3: the endpoint is `endpoint_url` when given, else the environment variable `AWS_ENDPOINT_URL`,
else AWS; a custom endpoint (MinIO, Ceph, moto) is addressed path-style, since its buckets have
no DNS names. Credentials come from boto3's usual chain (environment, ~/.aws, instance roles).
Transient failures (throttling, 5xx, dropped connections) are retried by botocore's `standard`
retry mode, with exponential backoff and jitter; 4xx answers (403, 404, a missing bucket) are
not. Files above `multipart_threshold` bytes go up in parallel parts.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from acesql.errors import ConfigError, StorageError

ENDPOINT_ENV = "AWS_ENDPOINT_URL"
CHECKSUM_META = "sha256"
CHECKSUM_DIR = ".sha256"
MiB = 1024 * 1024
NO_CREDENTIALS = (
    "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (plus "
    "AWS_SESSION_TOKEN for temporary ones), or AWS_PROFILE naming a profile in "
    "~/.aws/credentials, or run where an instance or container role is attached"
)
# S3 error codes of credentials that reached the server and were refused
REJECTED_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
}


@dataclass(frozen=True)
class StoredObject:
    """A file in a store: its key, size in bytes and SHA-256 (hex; None when never recorded)."""

    key: str
    size: int
    sha256: str | None


def file_sha256(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def check_key(key: str) -> str:
    """`key` itself when it is a relative `/`-separated path with no empty, `.` or `..` part.

    >>> check_key("runs/42/metrics.json")
    'runs/42/metrics.json'
    """
    parts = key.split("/")
    if not key or "\\" in key or any(part in ("", ".", "..") for part in parts):
        raise StorageError(
            f"invalid key {key!r}: use a relative path with / separators, such as "
            "runs/42/metrics.json"
        )
    return key


def resolve_endpoint(configured: str | None) -> str | None:
    """The S3 endpoint to use: `configured` (an option or params.yaml), else $AWS_ENDPOINT_URL."""
    return configured or os.environ.get(ENDPOINT_ENV) or None


class ArtifactStore:
    """Files under `/`-separated keys. Subclasses implement the four single-file calls."""

    url: str

    def upload(self, local_path: str | Path, key: str) -> StoredObject:
        """Store a file under `key`, replacing what was there, with its checksum."""
        raise NotImplementedError

    def download(self, key: str, local_path: str | Path) -> StoredObject:
        """Write the file stored under `key` to `local_path`, checksum-verified."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        """Whether a file is stored under `key` (a folder prefix is not a file)."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> list[str]:
        """The sorted keys starting with `prefix` (a folder: end it with `/`)."""
        raise NotImplementedError

    def upload_dir(self, local_dir: str | Path, prefix: str) -> list[StoredObject]:
        """Store every file under `local_dir` as `prefix/<its relative path>`."""
        local_dir = Path(local_dir)
        if not local_dir.is_dir():
            raise StorageError(f"{local_dir} is not a folder")
        files = sorted(path for path in local_dir.rglob("*") if path.is_file())
        return [
            self.upload(path, f"{check_key(prefix)}/{path.relative_to(local_dir).as_posix()}")
            for path in files
        ]

    def download_dir(self, prefix: str, local_dir: str | Path) -> list[StoredObject]:
        """Write every file under `prefix/` into `local_dir`, keeping the layout.

        All files are downloaded and verified into a staging folder first: if any fails,
        `local_dir` is left as it was. Files already in `local_dir` and not in the store stay.
        """
        folder = check_key(prefix) + "/"
        keys = self.list(folder)
        if not keys:
            raise StorageError(f"no object {prefix!r} and nothing under {folder} in {self.url}")
        local_dir = Path(local_dir)
        local_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{local_dir.name}.", dir=local_dir.parent))
        try:
            relative = [key.removeprefix(folder) for key in keys]
            objects = [self.download(key, staging / rel) for key, rel in zip(keys, relative)]
            for rel in relative:
                (local_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / rel, local_dir / rel)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return objects


class LocalStore(ArtifactStore):
    """A folder: files under `root/<key>`, their checksums under `root/.sha256/<key>`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.url = str(self.root)

    def upload(self, local_path: str | Path, key: str) -> StoredObject:
        source = _existing_file(local_path)
        digest = file_sha256(source)
        _land(lambda tmp: shutil.copyfile(source, tmp), self._path(key), None, key)
        checksum = self._checksum_path(key)
        checksum.parent.mkdir(parents=True, exist_ok=True)
        checksum.write_text(digest)
        return StoredObject(key, source.stat().st_size, digest)

    def download(self, key: str, local_path: str | Path) -> StoredObject:
        source = self._path(key)
        if not source.is_file():
            raise StorageError(f"no object {key!r} in {self.url}")
        checksum = self._checksum_path(key)
        expected = checksum.read_text().strip() if checksum.is_file() else None
        digest = _land(
            lambda tmp: shutil.copyfile(source, tmp), Path(local_path), expected, str(source)
        )
        return StoredObject(key, source.stat().st_size, digest)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        keys = (
            path.relative_to(self.root).as_posix()
            for path in self.root.rglob("*")
            if path.is_file() and path.relative_to(self.root).parts[0] != CHECKSUM_DIR
        )
        return sorted(key for key in keys if key.startswith(prefix))

    def _path(self, key: str) -> Path:
        if check_key(key).split("/")[0] == CHECKSUM_DIR:
            raise StorageError(f"invalid key {key!r}: {CHECKSUM_DIR}/ holds the store's checksums")
        return self.root / key

    def _checksum_path(self, key: str) -> Path:
        return self.root / CHECKSUM_DIR / key


class S3Store(ArtifactStore):
    """Objects of an S3 (or S3-compatible) bucket, under an optional key prefix."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        multipart_threshold: int = 8 * MiB,
        max_attempts: int = 5,
    ):
        import boto3
        from boto3.s3.transfer import TransferConfig
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        endpoint = resolve_endpoint(endpoint_url)
        config = Config(
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            s3={"addressing_style": "path"} if endpoint else None,
        )
        # a session of its own: boto3's default session is shared and not thread-safe
        self._client = boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)
        self._transfer = TransferConfig(multipart_threshold=multipart_threshold)

    @property
    def endpoint(self) -> str:
        """The endpoint requests go to, as boto3 resolved it."""
        return self._client.meta.endpoint_url

    def upload(self, local_path: str | Path, key: str) -> StoredObject:
        source = _existing_file(local_path)
        digest = file_sha256(source)
        with self._errors(key):
            self._client.upload_file(
                str(source),
                self.bucket,
                self._key(key),
                ExtraArgs={"Metadata": {CHECKSUM_META: digest}},
                Config=self._transfer,
            )
        return StoredObject(key, source.stat().st_size, digest)

    def download(self, key: str, local_path: str | Path) -> StoredObject:
        full = self._key(key)
        with self._errors(key):
            head = self._client.head_object(Bucket=self.bucket, Key=full)
            digest = _land(
                lambda tmp: self._client.download_file(
                    self.bucket, full, str(tmp), Config=self._transfer
                ),
                Path(local_path),
                head["Metadata"].get(CHECKSUM_META),
                f"{self.url}/{key}",
            )
        return StoredObject(key, head["ContentLength"], digest)

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        with self._errors(key):
            try:
                self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if _status(exc) == 404 and not self._bucket_missing():
                    return False
                raise
        return True

    def list(self, prefix: str = "") -> list[str]:
        root = f"{self.prefix}/" if self.prefix else ""
        keys = []
        with self._errors(None):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=root + prefix
            )
            for page in pages:
                keys.extend(obj["Key"].removeprefix(root) for obj in page.get("Contents", []))
        return sorted(keys)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{check_key(key)}" if self.prefix else check_key(key)

    @contextmanager
    def _errors(self, key: str | None) -> Iterator[None]:
        """Turn boto3's exceptions into a `StorageError` that says what to fix."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError, Boto3Error) as exc:
            raise self._explain(exc, key) from exc

    def _explain(self, exc: Exception, key: str | None) -> StorageError:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import (
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        # boto3's transfer manager wraps the botocore error it met (S3UploadFailedError)
        while isinstance(exc, Boto3Error) and (exc.__cause__ or exc.__context__):
            exc = exc.__cause__ or exc.__context__
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return StorageError(NO_CREDENTIALS)
        if isinstance(exc, EndpointConnectionError):
            return StorageError(
                f"cannot reach S3 endpoint {self.endpoint}: check the URL (--endpoint-url, "
                f"base.s3_endpoint_url or {ENDPOINT_ENV}) and that the server is up ({exc})"
            )
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = _status(exc)
            if code == "NoSuchBucket" or (status == 404 and self._bucket_missing()):
                return StorageError(
                    f"bucket {self.bucket} does not exist at endpoint {self.endpoint}: create it "
                    f"(aws s3 mb s3://{self.bucket}) or fix the store URL"
                )
            if status == 404 and key is not None:
                return StorageError(f"no object {key!r} in {self.url}")
            if code in REJECTED_CREDENTIALS:
                return StorageError(
                    f"AWS credentials were rejected by {self.endpoint} ({code}): check "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the profile in use"
                )
            if status == 403:
                return StorageError(
                    f"access denied to {self.url} at {self.endpoint} ({code or 403}): the "
                    "credentials lack permission on this bucket or prefix"
                )
        return StorageError(f"S3 request to {self.url} at {self.endpoint} failed: {exc}")

    def _bucket_missing(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            return _status(exc) == 404
        return False


def open_store(
    url: str, endpoint_url: str | None = None, multipart_threshold: int = 8 * MiB
) -> ArtifactStore:
    """The store at `url`: a folder path, or `s3://bucket[/prefix]` (see the module docstring).

    >>> open_store("artifacts").url
    'artifacts'
    """
    parts = urlsplit(url)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"artifact store {url!r} names no bucket: use s3://bucket/prefix")
        return S3Store(parts.netloc, parts.path, endpoint_url, multipart_threshold)
    if parts.scheme == "file":
        return LocalStore(parts.path)
    if parts.scheme:
        raise ConfigError(
            f"artifact store {url!r} has an unsupported scheme {parts.scheme!r}: use a folder "
            "path or s3://bucket/prefix"
        )
    return LocalStore(url)


def _existing_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise StorageError(f"{path} is not a file")
    return path


def _land(fetch: Callable[[Path], object], target: Path, expected: str | None, where: str) -> str:
    """Have `fetch` write a temporary file next to `target`, check it, rename it into place.

    Returns the file's SHA-256. On a checksum mismatch or any failure the temporary file is
    removed and `target` is untouched.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        fetch(tmp)
        digest = file_sha256(tmp)
        if expected is not None and digest != expected:
            raise StorageError(
                f"checksum mismatch for {where}: stored sha256 {expected}, received {digest}; "
                f"the object is corrupt or changed during the download, so {target} was not "
                "written"
            )
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return digest


def _status(exc) -> int | None:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
