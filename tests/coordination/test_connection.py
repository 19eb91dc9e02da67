"""connect() for the URL forms that need more than one plain server: Redis Sentinel (the client
asks a real Sentinel for the master) and TLS (rediss://, the server's certificate verified)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.coordination.connection import connect
from gateway.coordination.redis_slots import RedisSlots
from gateway.coordination.scripts import Keys
from tests.redis_server import RedisServer, running_redis


async def test_sentinel_url_reaches_the_master_the_sentinel_names() -> None:
    with running_redis() as master:
        sentinel = RedisServer(sentinel_config=f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n")
        sentinel.start()
        try:
            client = connect(f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster/0", timeout=5.0)
            slots = RedisSlots(client, "p", keys=Keys("sentinel"))
            assert await slots.try_acquire("b", "t", 1) is not None
            await client.aclose()
            direct = connect(master.url, timeout=5.0)
            assert await direct.zcard(Keys("sentinel").slots("b")) == 1
            await direct.aclose()
        finally:
            sentinel.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA), made with openssl."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def test_rediss_url_speaks_tls_and_verifies_the_certificate(certificate: tuple[Path, Path]) -> None:
    server = RedisServer(tls=certificate)
    server.start()
    try:
        cert = certificate[0]
        client = connect(f"{server.url}?ssl_cert_reqs=required&ssl_ca_certs={cert}", timeout=5.0)
        assert await RedisSlots(client, "p", keys=Keys("tls")).try_acquire("b", "t", 1) is not None
        await client.aclose()
        plain = connect(f"redis://127.0.0.1:{server.port}/0", timeout=2.0)
        with pytest.raises(RedisConnectionError):
            await plain.ping()
        await plain.aclose()
        unverified = connect(f"{server.url}?ssl_cert_reqs=required", timeout=2.0)  # system CAs only
        with pytest.raises(RedisConnectionError):
            await unverified.ping()
        await unverified.aclose()
    finally:
        server.close()
