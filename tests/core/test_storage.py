"""Artifact stores: a folder, and S3 over real HTTP (a moto server on loopback)."""

import hashlib
import http.client
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import pytest
from pydantic import ValidationError

from acesql.config import BaseSection
from acesql.errors import ConfigError, StorageError
from acesql.storage import LocalStore, S3Store, open_store

MiB = 1024 * 1024


@pytest.fixture
def s3(s3_server):
    return boto3.client("s3", endpoint_url=s3_server)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    bucket = request.getfixturevalue("s3_bucket")
    return S3Store(bucket, "team/acesql", endpoint_url=request.getfixturevalue("s3_server"))


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _corrupt(store, key: str, data: bytes, s3) -> None:
    """Replace a stored file's bytes behind the store's back, keeping its recorded checksum."""
    if isinstance(store, LocalStore):
        (store.root / key).write_bytes(data)
        return
    full = f"{store.prefix}/{key}"
    metadata = s3.head_object(Bucket=store.bucket, Key=full)["Metadata"]
    s3.put_object(Bucket=store.bucket, Key=full, Body=data, Metadata=metadata)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_round_trip_records_and_checks_the_sha256(store, tmp_path):
    data = os.urandom(100_000)
    source = _write(tmp_path / "pool.json", data)
    stored = store.upload(source, "runs/7/pool.json")
    assert stored.sha256 == hashlib.sha256(data).hexdigest() and stored.size == len(data)
    assert store.exists("runs/7/pool.json") and not store.exists("runs/7/other.json")
    assert store.list("runs/") == ["runs/7/pool.json"]

    got = store.download("runs/7/pool.json", tmp_path / "back" / "pool.json")
    assert (tmp_path / "back" / "pool.json").read_bytes() == data
    assert got.sha256 == stored.sha256 and got.size == len(data)
    assert _leftovers(tmp_path / "back") == []


def test_s3_keeps_the_checksum_as_object_metadata(s3_bucket, s3_server, s3, tmp_path):
    store = S3Store(s3_bucket, "team/acesql", endpoint_url=s3_server)
    stored = store.upload(_write(tmp_path / "a.txt", b"hello"), "reports/a.txt")
    head = s3.head_object(Bucket=s3_bucket, Key="team/acesql/reports/a.txt")
    assert (
        head["Metadata"]
        == {"sha256": hashlib.sha256(b"hello").hexdigest()}
        == {"sha256": stored.sha256}
    )
    assert store.url == f"s3://{s3_bucket}/team/acesql"


def test_big_files_go_up_in_parts(s3_bucket, s3_server, s3, tmp_path):
    data = os.urandom(9 * MiB)  # parts of 8 MiB: two
    store = S3Store(s3_bucket, endpoint_url=s3_server, multipart_threshold=1 * MiB)
    store.upload(_write(tmp_path / "model.safetensors", data), "ckpt/model.safetensors")
    etag = s3.head_object(Bucket=s3_bucket, Key="ckpt/model.safetensors")["ETag"]
    assert etag.strip('"').endswith("-2")
    store.download("ckpt/model.safetensors", tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == data


def test_small_files_go_up_whole(s3_bucket, s3_server, s3, tmp_path):
    store = S3Store(s3_bucket, endpoint_url=s3_server, multipart_threshold=1 * MiB)
    store.upload(_write(tmp_path / "small", b"x" * 1000), "small")
    assert "-" not in s3.head_object(Bucket=s3_bucket, Key="small")["ETag"]


def test_folder_round_trip(store, tmp_path):
    tree = {"config.json": b"{}", "model.safetensors": os.urandom(5000), "sub/tok.json": b"[1]"}
    for name, data in tree.items():
        _write(tmp_path / "ckpt" / name, data)
    stored = store.upload_dir(tmp_path / "ckpt", "runs/7/checkpoint-80")
    assert sorted(o.key for o in stored) == sorted(f"runs/7/checkpoint-80/{n}" for n in tree)
    assert store.list("runs/7/checkpoint-80/") == sorted(o.key for o in stored)

    target = _write(tmp_path / "restored" / "notes.txt", b"mine")
    store.download_dir("runs/7/checkpoint-80", target.parent)
    for name, data in tree.items():
        assert (target.parent / name).read_bytes() == data
    assert target.read_bytes() == b"mine"
    assert _leftovers(tmp_path) == []


def test_corrupt_object_is_refused_and_nothing_is_written(store, tmp_path, request):
    s3 = request.getfixturevalue("s3") if isinstance(store, S3Store) else None
    store.upload(_write(tmp_path / "pool.json", b'{"a": 1}'), "pool.json")
    _corrupt(store, "pool.json", b'{"a": 2}', s3)

    fresh = tmp_path / "out" / "pool.json"
    with pytest.raises(StorageError, match=r"checksum mismatch for .*pool\.json: stored sha256"):
        store.download("pool.json", fresh)
    assert not fresh.exists() and _leftovers(fresh.parent) == []

    kept = _write(tmp_path / "kept" / "pool.json", b"previous")
    with pytest.raises(StorageError, match="was not written"):
        store.download("pool.json", kept)
    assert kept.read_bytes() == b"previous" and _leftovers(kept.parent) == []


def test_folder_download_changes_nothing_unless_every_file_verifies(store, tmp_path, request):
    s3 = request.getfixturevalue("s3") if isinstance(store, S3Store) else None
    for name in ("a.bin", "b.bin", "c.bin"):
        _write(tmp_path / "ckpt" / name, name.encode())
    store.upload_dir(tmp_path / "ckpt", "ckpt")
    _corrupt(store, "ckpt/c.bin", b"bad", s3)

    target = _write(tmp_path / "restored" / "a.bin", b"old")
    with pytest.raises(StorageError, match="checksum mismatch"):
        store.download_dir("ckpt", target.parent)
    assert [p.name for p in target.parent.iterdir()] == ["a.bin"]
    assert target.read_bytes() == b"old" and _leftovers(tmp_path) == []


def test_missing_key(store, tmp_path):
    with pytest.raises(StorageError, match=r"no object 'runs/none\.json' in "):
        store.download("runs/none.json", tmp_path / "x")
    with pytest.raises(StorageError, match=r"nothing under runs/none/ in "):
        store.download_dir("runs/none", tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("key", ["", "/abs", "../up", "a/../../b", "a//b", "a/./b", "a\\b"])
def test_invalid_keys_are_refused(store, tmp_path, key):
    with pytest.raises(StorageError, match="invalid key"):
        store.upload(_write(tmp_path / "f", b"1"), key)


def test_local_store_keeps_its_checksums_out_of_the_keys(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.upload(_write(tmp_path / "f", b"1"), "f")
    assert store.list() == ["f"]
    with pytest.raises(StorageError, match="holds the store's checksums"):
        store.upload(tmp_path / "f", ".sha256/f")


def test_missing_bucket_says_which_and_where(s3_bucket, s3_server, tmp_path):
    store = S3Store("acesql-no-such-bucket", endpoint_url=s3_server)
    message = rf"bucket acesql-no-such-bucket does not exist at endpoint {s3_server}"
    source = _write(tmp_path / "f", b"1")
    calls = [
        lambda: store.upload(source, "f"),
        lambda: store.download("f", tmp_path / "g"),
        lambda: store.exists("f"),
        lambda: store.list(),
    ]
    for call in calls:
        with pytest.raises(StorageError, match=message):
            call()


def test_missing_credentials_say_what_to_set(s3_bucket, s3_server, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    for name in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3Store(s3_bucket, endpoint_url=s3_server)
    with pytest.raises(StorageError, match=r"^no AWS credentials found: set AWS_ACCESS_KEY_ID"):
        store.upload(_write(tmp_path / "f", b"1"), "f")
    with pytest.raises(StorageError, match=r"^no AWS credentials found"):
        store.download("f", tmp_path / "g")


def test_endpoint_comes_from_the_environment_unless_given(s3_bucket, s3_server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    assert S3Store(s3_bucket).list() == []
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    assert S3Store(s3_bucket, endpoint_url=s3_server).endpoint == s3_server
    with pytest.raises(StorageError, match=r"cannot reach S3 endpoint http://127\.0\.0\.1:9"):
        S3Store(s3_bucket, max_attempts=1).list()


def test_open_store_picks_by_scheme(tmp_path, s3_server):
    s3_store = open_store("s3://bkt/team/acesql/", endpoint_url=s3_server)
    assert isinstance(s3_store, S3Store)
    assert (s3_store.bucket, s3_store.prefix) == ("bkt", "team/acesql")
    assert s3_store.endpoint == s3_server and s3_store.url == "s3://bkt/team/acesql"
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert open_store(f"file://{tmp_path}").root == tmp_path
    with pytest.raises(ConfigError, match=r"unsupported scheme 'gs': use a folder path or s3://"):
        open_store("gs://bkt/x")
    with pytest.raises(ConfigError, match="names no bucket"):
        open_store("s3:///x")


def test_config_fields_validate():
    base = BaseSection()
    assert (base.artifact_store, base.s3_endpoint_url, base.dvc_remote) == ("artifacts", None, None)
    with pytest.raises(ValidationError, match="dvc_remote"):
        BaseSection(dvc_remote="gs://bkt/dvc")
    with pytest.raises(ValidationError, match="s3_endpoint_url"):
        BaseSection(s3_endpoint_url="127.0.0.1:9000")


# ----------------------------------------------------------------- retries
class FlakyProxy:
    """An HTTP proxy in front of the S3 server that answers the next requests with errors."""

    def __init__(self, upstream: str):
        self.failures: list[tuple[int, str]] = []  # (status, S3 error code), next first
        self.methods: list[str] = []
        proxy, target = self, urlsplit(upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.methods.append(self.command)
                if proxy.failures:
                    status, code = proxy.failures.pop(0)
                    error = f"<Error><Code>{code}</Code><Message>injected</Message></Error>"
                    self.answer(status, [("Content-Type", "application/xml")], error.encode())
                    return
                upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                self.answer(response.status, response.getheaders(), response.read())
                upstream.close()

            def answer(self, status, headers, payload):
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = relay

            def do_HEAD(self):
                self.relay()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def proxy(s3_server):
    flaky = FlakyProxy(s3_server)
    yield flaky
    flaky.server.shutdown()


def test_transient_errors_are_retried(s3_bucket, proxy, s3, tmp_path):
    store = S3Store(s3_bucket, endpoint_url=proxy.url, max_attempts=5)
    proxy.failures = [(503, "SlowDown"), (503, "SlowDown")]
    store.upload(_write(tmp_path / "f", b"payload"), "f")
    assert proxy.methods == ["PUT", "PUT", "PUT"]
    assert s3.get_object(Bucket=s3_bucket, Key="f")["Body"].read() == b"payload"

    proxy.methods.clear()
    proxy.failures = [(500, "InternalError")] * 3
    with pytest.raises(StorageError, match="InternalError"):
        S3Store(s3_bucket, endpoint_url=proxy.url, max_attempts=3).upload(tmp_path / "f", "g")
    assert proxy.methods == ["PUT"] * 3


@pytest.mark.parametrize(
    "status,code,message",
    [
        (403, "InvalidAccessKeyId", r"AWS credentials were rejected by .* \(InvalidAccessKeyId\)"),
        (403, "AccessDenied", r"access denied to s3://.* \(AccessDenied\): the credentials lack"),
    ],
)
def test_client_errors_are_not_retried(s3_bucket, proxy, tmp_path, status, code, message):
    store = S3Store(s3_bucket, endpoint_url=proxy.url, max_attempts=5)
    proxy.failures = [(status, code)]
    with pytest.raises(StorageError, match=message):
        store.upload(_write(tmp_path / "f", b"1"), "f")
    assert proxy.methods == ["PUT"]


# --------------------------------------------------------------------- CLI
def acesql(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "acesql.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_cli_put_ls_get_on_s3(s3_bucket, s3_server, tmp_path):
    _write(tmp_path / "ckpt" / "config.json", b"{}")
    _write(tmp_path / "ckpt" / "sub" / "w.bin", b"\x00\x01")
    store = ["--store", f"s3://{s3_bucket}/team", "--endpoint-url", s3_server]

    put = acesql("artifacts", "put", *store, tmp_path / "ckpt", "runs/1/ckpt")
    assert put.returncode == 0, put.stderr
    out = json.loads(put.stdout)
    assert out["store"] == f"s3://{s3_bucket}/team"
    keys = ["runs/1/ckpt/config.json", "runs/1/ckpt/sub/w.bin"]
    assert [o["key"] for o in out["objects"]] == keys
    assert json.loads(acesql("artifacts", "ls", *store, "runs/").stdout)["keys"] == keys

    assert acesql("artifacts", "get", *store, "runs/1/ckpt", tmp_path / "back").returncode == 0
    assert (tmp_path / "back" / "sub" / "w.bin").read_bytes() == b"\x00\x01"
    one = acesql("artifacts", "get", *store, "runs/1/ckpt/config.json", tmp_path / "c.json")
    assert one.returncode == 0 and (tmp_path / "c.json").read_bytes() == b"{}"

    missing = acesql("artifacts", "get", *store, "runs/2", tmp_path / "none")
    assert missing.returncode == 2
    assert "error: no object 'runs/2' and nothing under runs/2/" in missing.stderr


def test_cli_reads_the_store_from_params(tmp_path):
    (tmp_path / "params.yaml").write_text("base:\n  artifact_store: shared\n")
    _write(tmp_path / "report.html", b"<html/>")
    put = acesql("artifacts", "put", "report.html", "reports/r.html", cwd=tmp_path)
    assert put.returncode == 0, put.stderr
    assert (tmp_path / "shared" / "reports" / "r.html").read_bytes() == b"<html/>"
    assert json.loads(acesql("artifacts", "ls", cwd=tmp_path).stdout)["keys"] == ["reports/r.html"]


def test_cli_errors_exit_2(tmp_path, s3_bucket, s3_server):
    bad = acesql("artifacts", "ls", "--store", "gs://bkt")
    assert bad.returncode == 2 and "unsupported scheme 'gs'" in bad.stderr
    store = ["--store", "s3://acesql-no-such-bucket", "--endpoint-url", s3_server]
    nobucket = acesql("artifacts", "ls", *store)
    assert nobucket.returncode == 2
    assert "bucket acesql-no-such-bucket does not exist at endpoint" in nobucket.stderr
