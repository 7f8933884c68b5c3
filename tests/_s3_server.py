"""moto's S3 server on loopback, and a pyarrow filesystem pointed at it: a real S3-compatible
server reached over HTTP, exactly as a bucket on AWS would be. Shared by the tests that need
one (the trajectory store on S3, the run-folder sync)."""

from __future__ import annotations

import logging
import secrets

import pyarrow.fs as pafs
import pytest

BUCKET = "arthex-runs"
KEY, SECRET, REGION = "testing", "testing", "us-east-1"


class S3:
    """A moto server on 127.0.0.1 and a pyarrow filesystem pointed at it."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"{host}:{port}"
        self.filesystem = pafs.S3FileSystem(
            endpoint_override=self.endpoint, scheme="http", access_key=KEY, secret_key=SECRET,
            region=REGION, allow_bucket_creation=True,
        )  # fmt: skip
        self.filesystem.create_dir(BUCKET)

    def prefix(self) -> str:
        """A fresh, empty place in the bucket."""
        return f"{BUCKET}/{secrets.token_hex(6)}"

    def keys(self, prefix: str) -> list[str]:
        selector = pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
        return sorted(
            info.path[len(prefix) + 1 :]
            for info in self.filesystem.get_file_info(selector)
            if info.type == pafs.FileType.File
        )

    def read(self, key: str) -> bytes:
        with self.filesystem.open_input_stream(key) as stream:
            data: bytes = stream.read()
            return data

    def use_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point the AWS environment (what pyarrow's from_uri, boto3 and the `aws` command
        read) at this server, and keep every ~/.aws file out of it."""
        for name, value in {
            "AWS_ENDPOINT_URL": f"http://{self.endpoint}",
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
            "AWS_EC2_METADATA_DISABLED": "true",
        }.items():
            monkeypatch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "BACKUP_BUCKET"):
            monkeypatch.delenv(name, raising=False)

    def stop(self) -> None:
        self.server.stop()
