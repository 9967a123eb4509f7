"""#38 (item 5): the ssh tunnel of loadtest and `validate --engine-roundtrip` ends in a Unix socket
that only the controller's user reaches, never in a TCP port another account could connect to
or bind first.

Real: this machine's OpenSSH client (`kvprov.tunnel.forward`, as loadtest runs it) against a
real SSH server on 127.0.0.1 (paramiko, a kvprov dependency: key authentication and the
`direct-tcpip` channels `ssh -L` opens), which plays the GPU host: the ports of its loopback
are those of `host_ports`, each held on this machine's loopback by a socket that never
listens (a client that went to 127.0.0.1:<port> directly would be refused), and served by
the server's relay to the engine stand-in. Another account is `nobody` (setpriv, as root)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import stat
import subprocess
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path

import paramiko
import pytest

from kvprov import ansible_cli, tunnel
from kvprov import loadtest as lt
from kvprov import loadtest_client as ltc
from tests.conftest import ROOT, kvprov
from tests.tls import make_cert, pem
from tests.unit.test_loadtest import StandIn, standins  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(not shutil.which("ssh"), reason="needs the OpenSSH client")


class Sshd:
    """A real SSH server on 127.0.0.1 that accepts one key and opens `direct-tcpip` channels to
    the host's loopback ports it knows: {port as the host sees it: the port it is relayed to}."""

    def __init__(self, d: Path, ports: dict[int, int]):
        self.ports, self.opened = ports, []  # opened: the destinations of the channels, in order
        self.host_key, self.user_key = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
        self.key_file = d / "id_ecdsa"
        self.user_key.write_private_key_file(str(self.key_file))
        self.key_file.chmod(0o600)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.transports: list[paramiko.Transport] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def values(self) -> dict:
        """The host's connection variables (an inventory host's), for this server."""
        return {"ansible_host": "127.0.0.1", "ansible_port": self.port, "ansible_user": "kvprov",
                "ansible_ssh_private_key_file": str(self.key_file),
                "ansible_ssh_args": "-F /dev/null -o UserKnownHostsFile=/dev/null -o GlobalKnownHostsFile=/dev/null "
                                    "-o StrictHostKeyChecking=no -o LogLevel=ERROR"}

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        outer, wanted = self, {}

        class Server(paramiko.ServerInterface):
            def get_allowed_auths(self, username):
                return "publickey"

            def check_auth_publickey(self, username, key):
                return paramiko.AUTH_SUCCESSFUL if key.get_base64() == outer.user_key.get_base64() \
                    else paramiko.AUTH_FAILED

            def check_channel_direct_tcpip_request(self, chanid, origin, destination):
                if destination[0] != "127.0.0.1" or destination[1] not in outer.ports:
                    return paramiko.OPEN_FAILED_CONNECT_FAILED
                wanted[chanid] = destination
                return paramiko.OPEN_SUCCEEDED

        t = paramiko.Transport(conn)
        self.transports.append(t)
        t.add_server_key(self.host_key)
        try:
            t.start_server(server=Server())
        except (paramiko.SSHException, EOFError, OSError):
            return
        while t.is_active():
            chan = t.accept(0.5)
            if chan is not None:
                dest = wanted.pop(chan.get_id())
                self.opened.append(dest)
                threading.Thread(target=self._relay, args=(chan, self.ports[dest[1]]), daemon=True).start()

    @staticmethod
    def _relay(chan, port: int) -> None:
        """The channel to the port and back, until either side closes (the client gone: EOFError)."""
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            sock = None
        if sock is not None:
            sock.settimeout(None)

            def up():
                try:
                    while data := chan.recv(65536):
                        sock.sendall(data)
                    sock.shutdown(socket.SHUT_WR)
                except (OSError, EOFError):
                    pass
            threading.Thread(target=up, daemon=True).start()
            try:
                while data := sock.recv(65536):
                    chan.sendall(data)
            except (OSError, EOFError):
                pass
            sock.close()
        try:
            chan.close()
        except (OSError, EOFError):
            pass

    def close(self) -> None:
        self.listener.close()
        for t in self.transports:
            t.close()


@pytest.fixture
def host(tmp_path, monkeypatch):
    """make(**{port on the host: port here}) -> Sshd; the host ports are held on this machine's
    loopback by sockets that never listen: only the tunnel reaches them."""
    monkeypatch.setattr(ansible_cli, "_user", [])
    made, held = [], []

    def make(relay: dict[int, int]) -> tuple[Sshd, dict[str, int]]:
        names = {}
        for name, port in relay.items():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))  # bound, never listening: a direct connection is refused
            held.append(s)
            names[name] = s.getsockname()[1]
        sshd = Sshd(tmp_path, {names[name]: port for name, port in relay.items()})
        made.append(sshd)
        return sshd, names
    yield make
    for s in made:
        s.close()
    for s in held:
        s.close()


def children(name: str) -> list[int]:
    """This process's child processes called `name`."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and comm == name:
            out.append(int(pid))
    return out


def socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def tcp_listeners() -> set[str]:
    """The inodes of every listening TCP socket (IPv4 and IPv6) of this network namespace."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":  # LISTEN
                out.add(f[9])
    return out


def unix_listeners() -> dict[str, str]:
    """{inode: path} of every listening Unix socket with a path."""
    out = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[3] == "00010000":  # __SO_ACCEPTCON: listening
            out[f[6]] = f[7]
    return out


PROBE = """import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""
PYTHON = "/usr/bin/python3"  # this test's interpreter may live in /root, which nobody can enter


def as_nobody(path: str) -> str:
    """What another account (nobody, no groups) gets connecting to the Unix socket `path`."""
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PYTHON, "-I", "-c", PROBE,
                        path], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_forward_is_a_socket_only_its_owner_reaches_and_no_tcp_port(host, standins, tmp_path):
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(PYTHON, os.X_OK):
        pytest.skip("another account's view needs root, setpriv and /usr/bin/python3")
    engine = standins(key="sk-tunnel-key")
    sshd, port = host({"api": int(engine.url.rsplit(":", 1)[1])})
    # the probe itself can reach a socket open to everyone: a refusal below is the tunnel's
    open_dir = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        open_dir.chmod(0o755)
        with socket.socket(socket.AF_UNIX) as control:
            control.bind(str(open_dir / "s"))
            (open_dir / "s").chmod(0o666)
            control.listen()
            assert as_nobody(str(open_dir / "s")) == "connected"
    finally:
        shutil.rmtree(open_dir)

    with tunnel.forward("gpu7", sshd.values(), [port["api"]], timeout=30, defaults={}) as sockets:
        path = sockets[port["api"]]
        d = os.path.dirname(path)
        st, sk = os.lstat(d), os.lstat(path)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
        assert stat.S_ISSOCK(sk.st_mode) and stat.S_IMODE(sk.st_mode) == 0o600 and sk.st_uid == os.getuid()
        # ssh listens on the socket, and on no TCP port at all
        [pid] = children("ssh")
        mine = socket_inodes(pid)
        assert path in {p for inode, p in unix_listeners().items() if inode in mine}
        assert not mine & tcp_listeners(), "ssh listens on a TCP port"
        # another account: refused by the directory, and by the socket's own mode where the directory opens
        assert as_nobody(path) == "EACCES"
        os.chmod(d, 0o711)
        try:
            assert as_nobody(path) == "EACCES"
        finally:
            os.chmod(d, 0o700)
        # its owner gets the engine's answer, through the host's loopback port (refused here directly)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port["api"]), timeout=5).close()
        ep = ltc.Endpoint("gpu7/main", f"http://127.0.0.1:{port['api']}", api_key="sk-tunnel-key",
                          sockets={f"127.0.0.1:{port['api']}": path})
        assert ltc.Client(ep, 10).get_json("/v1/models")["data"][0]["id"] == "tiny"
    assert engine.seen[-1] == ("GET", "/v1/models", "Bearer sk-tunnel-key")
    assert (("127.0.0.1", port["api"])) in sshd.opened
    assert not os.path.lexists(d) and not children("ssh")


def _tls_engine(tmp_path: Path, standins, ips=("127.0.0.1",)) -> tuple[StandIn, str]:
    """A stand-in serving https with a certificate for `ips`, and the CA file that verifies it."""
    ca = make_cert("kvprov test CA")
    cert, key = make_cert("engine", issuer=ca, ips=ips)
    (tmp_path / "srv.crt").write_text(pem(cert=cert))
    (tmp_path / "srv.key").write_text(pem(key=key))
    (tmp_path / "ca.pem").write_text(pem(cert=ca[0]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    engine = standins(key="sk-tls-key")
    engine.server.socket = ctx.wrap_socket(engine.server.socket, server_side=True)
    return engine, str(tmp_path / "ca.pem")


def _stream(ep: ltc.Endpoint) -> dict:
    async def one():
        async with ltc.AsyncClient(ep, 10) as client:
            return await client.stream("/v1/chat/completions", {
                "model": "tiny", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 3,
                "stream": True})
    return asyncio.run(one())


@pytest.mark.parametrize("names, trusted", [(("127.0.0.1",), True), (("10.0.0.9",), False)])
def test_tls_through_the_socket_is_verified_for_the_engines_own_address(host, standins, tmp_path, names, trusted):
    """https through the tunnel: both clients (the JSON calls and the streamed load) verify the
    engine's certificate for its address on the host, with the endpoint's CA, as over TCP; a
    certificate for another address is refused, and the key never leaves."""
    engine, ca = _tls_engine(tmp_path, standins, names)
    sshd, port = host({"api": int(engine.url.rsplit(":", 1)[1])})
    with tunnel.forward("gpu7", sshd.values(), [port["api"]], timeout=30, defaults={}) as sockets:
        url = f"https://127.0.0.1:{port['api']}"
        ep = ltc.Endpoint("gpu7/main", url, api_key="sk-tls-key", ca_file=ca,
                          sockets={f"127.0.0.1:{port['api']}": sockets[port["api"]]})
        if trusted:
            assert ltc.Client(ep, 10).get_json("/v1/models")["data"][0]["id"] == "tiny"
            answer = _stream(ep)
            assert answer["ok"] and answer["output_tokens"] == 3, answer
            assert [a for m, p, a in engine.seen] == ["Bearer sk-tls-key"] * 2
            untrusted = ltc.Endpoint("gpu7/main", url, api_key="sk-tls-key", sockets=ep.sockets)  # the trust store
            with pytest.raises(ltc.EndpointError, match="TLS: the engine's certificate is not trusted"):
                ltc.Client(untrusted, 10).get_json("/v1/models")
            assert _stream(untrusted)["error"].startswith("POST /v1/chat/completions: TLS: the engine's certificate "
                                                          "is not trusted (unable to get local issuer certificate;")
        else:
            with pytest.raises(ltc.EndpointError, match="TLS: the engine's certificate is not trusted \\(IP address "
                                                        "mismatch"):
                ltc.Client(ep, 10).get_json("/v1/models")
            assert _stream(ep)["error"].startswith("POST /v1/chat/completions: TLS: the engine's certificate is not "
                                                   "trusted (IP address mismatch")
        assert len(engine.seen) == (2 if trusted else 0)  # no request where the certificate was refused


def test_a_plain_stream_goes_through_the_socket_and_a_missing_one_is_said(host, standins):
    engine = standins()
    sshd, port = host({"api": int(engine.url.rsplit(":", 1)[1])})
    with tunnel.forward("gpu7", sshd.values(), [port["api"]], timeout=30, defaults={}) as sockets:
        ep = ltc.Endpoint("gpu7/main", f"http://127.0.0.1:{port['api']}",
                          sockets={f"127.0.0.1:{port['api']}": sockets[port["api"]]})
        answer = _stream(ep)
        assert answer["ok"] and answer["text"] == "w0 w1 w2 ", answer
    assert engine.posts() == ["/v1/chat/completions"]
    # the tunnel closed: its socket is gone, and the clients say so (never another way to the port)
    with pytest.raises(ltc.EndpointError, match="^not reachable: GET /v1/models: No such file or directory$"):
        ltc.Client(ep, 10).get_json("/v1/models")
    assert "No such file or directory" in _stream(ep)["error"]


def _inventory(tmp_path: Path, sshd: Sshd, key: Path, api: int, metrics: int) -> Path:
    """inventory/lab-engine.yml with its host reached through `sshd` (its loopback: the engine)."""
    v = sshd.values()
    text = (ROOT / "inventory/lab-engine.yml").read_text()
    text = text.replace("ansible_user: root\n", f"ansible_user: {v['ansible_user']}\n")
    text = text.replace("ansible_ssh_private_key_file: /var/lib/kvprov/lab/id_ed25519\n",
                        f"ansible_ssh_private_key_file: {v['ansible_ssh_private_key_file']}\n"
                        f"    ansible_ssh_args: {v['ansible_ssh_args']}\n")
    text = text.replace("ansible_host: 10.98.1.2", f"ansible_host: 127.0.0.1\n              ansible_port: {sshd.port}")
    text = text.replace("            kvprov_engine: lmcache_mp\n", f"""            kvprov_engine: lmcache_mp
            kvprov_engine_api_key_file: {key}
            kvprov_engine_instances:
            - name: main
              port: {api}
              lmcache_port: 18000
              metrics_port: {metrics}
""")
    assert f"ansible_port: {sshd.port}" in text and "ansible_ssh_args" in text and str(key) in text
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    return inv


def test_loadtest_reaches_a_loopback_engine_through_the_tunnels_socket(host, standins, tmp_path, monkeypatch,
                                                                        short_tmp):
    """The real CLI against an inventory host whose engine listens on its loopback: every request
    (the API with the key, the engine's and LMCache's /metrics without) crosses the tunnel; the
    JSON names the engine's address on the host and the tunnel; the socket directory is gone."""
    key = tmp_path / "api-key"
    key.write_text("sk-inventory-key\n")
    key.chmod(0o600)
    engine, server = standins(key="sk-inventory-key", lmcache=False), standins(vllm=False)
    sshd, port = host({"api": int(engine.url.rsplit(":", 1)[1]), "metrics": int(server.url.rsplit(":", 1)[1])})
    inv = _inventory(tmp_path, sshd, key, port["api"], port["metrics"])
    monkeypatch.setenv("TMPDIR", str(short_tmp / "tmp"))
    out = tmp_path / "run"
    r = kvprov("loadtest", str(inv), "--instances", "main", "--prompt-tokens", "64", "--turns", "2",
               "--output-tokens", "4", "--turn-tokens", "16", "--out", str(out), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"kvlab-c1: the engine listens on its loopback: ssh tunnel for port(s) " \
           f"{','.join(map(str, sorted(port.values())))}" in r.stderr
    doc = json.loads((out / "loadtest.json").read_text())
    [ep] = doc["endpoints"]
    api = f"http://127.0.0.1:{port['api']}"
    assert (ep["url"], ep["tunnel"], ep["problem"]) == (api, f"ssh tunnel to kvlab-c1's 127.0.0.1:{port['api']}", None)
    assert ep["metrics_urls"] == [f"{api}/metrics", f"http://127.0.0.1:{port['metrics']}/metrics"]
    assert {p["url"] for p in doc["points"]} == {api} and len(doc["points"]) == 2
    assert doc["points"][1]["cache"]["hit_tokens"]["vllm_prefix"] > 0 and not doc["points"][1]["metrics_errors"]
    assert all(a == (None if p == "/metrics" else "Bearer sk-inventory-key") for _, p, a in engine.seen)
    assert len(engine.posts()) >= 2 and [(p, a) for _, p, a in server.seen] == [("/metrics", None)] * 4
    assert {d[1] for d in sshd.opened} == set(port.values())
    assert list((short_tmp / "tmp").iterdir()) == []  # the socket directory removed at the end
    assert "sk-inventory-key" not in (out / "loadtest.json").read_text() + r.stdout + r.stderr


def test_validates_round_trip_goes_through_the_tunnels_socket(host, standins, tmp_path, monkeypatch, short_tmp):
    """validate --engine-roundtrip's warm-up, wait after the restart and replay through the tunnel
    (the restart itself, an Ansible play, stands aside: the stand-in keeps running)."""
    key = tmp_path / "api-key"
    key.write_text("sk-roundtrip-key\n")
    key.chmod(0o600)
    engine = standins(key="sk-roundtrip-key")  # vLLM's and LMCache's counters, on both ports
    sshd, port = host({"api": int(engine.url.rsplit(":", 1)[1]), "metrics": int(engine.url.rsplit(":", 1)[1])})
    inv = _inventory(tmp_path, sshd, key, port["api"], port["metrics"])
    restarted = []

    def restart(sources, ep, timeout, probe_timeout):
        restarted.append((ep.url, dict(ep.sockets)))
        ltc.wait_ready(ep, probe_timeout, timeout, " after the restart")
    monkeypatch.setattr(lt, "restart_engine", restart)
    [result] = lt.roundtrip([str(inv)], None)
    assert (result.id, result.status) == ("engine.main.roundtrip", "pass"), result
    [(url, sockets)] = restarted
    assert url == f"http://127.0.0.1:{port['api']}"
    assert set(sockets) == {f"127.0.0.1:{port['api']}", f"127.0.0.1:{port['metrics']}"}
    assert all(os.path.dirname(p).startswith(str(short_tmp / "tmp") + "/kvprov-tunnel-") for p in sockets.values())
    assert len(engine.posts()) >= 2 and all(a == (None if p == "/metrics" else "Bearer sk-roundtrip-key")
                                            for _, p, a in engine.seen)
    assert {d[1] for d in sshd.opened} == set(port.values())
    assert list((short_tmp / "tmp").iterdir()) == []


def test_a_local_host_is_reached_directly_without_a_tunnel(standins, monkeypatch):
    """`ansible_connection: local`: the engine is this machine's, no ssh and no socket."""
    engine = standins()
    port = int(engine.url.rsplit(":", 1)[1])
    monkeypatch.setattr(tunnel, "forward", lambda *a, **k: pytest.fail("no tunnel for a local host"))
    state = {"engine": {"name": "vllm_offload", "instances": [{"name": "main", "port": port}]}}
    [ep] = lt.inventory_endpoints({"me": {"ansible_connection": "local", "kvprov_engine_host": "127.0.0.1"}},
                                  {"me": state})
    with ExitStack() as stack:
        lt.open_tunnels([ep], stack)
    assert (ep.via, ep.tunnel, ep.sockets, ep.url) == (None, None, {}, engine.url)
    assert ltc.Client(ep, 10).get_json("/v1/models")["data"][0]["id"] == "tiny"


def test_a_tunnel_that_does_not_open_is_its_endpoints_problem(host, standins, monkeypatch):
    engine = standins()
    sshd, port = host({"api": int(engine.url.rsplit(":", 1)[1])})
    values = {**sshd.values(), "ansible_ssh_private_key_file": os.devnull}  # not the key the server takes
    state = {"engine": {"name": "vllm_offload", "instances": [{"name": "main", "port": port["api"]}]}}
    [ep] = lt.inventory_endpoints({"gpu7": {**values, "kvprov_engine_host": "127.0.0.1"}}, {"gpu7": state})
    with ExitStack() as stack:
        lt.open_tunnels([ep], stack)
    assert ep.problem.startswith("gpu7: the ssh tunnel to its engine did not open: ") and "Permission denied" in \
        ep.problem, ep.problem
    assert ep.sockets == {} and engine.seen == []
