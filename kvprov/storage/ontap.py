"""ONTAP through its REST API: read what the KV-cache tier needs of the SVM (I/O: `fetch`)
and judge it (pure: `evaluate`).

Read-only, four collections of the SVM (ONTAP 9.10.1 or later for NFS over RDMA):
- GET /api/protocols/nfs/services: enabled, state, protocol.v40_enabled, .v41_enabled,
  .v4_id_domain, .v41_features.pnfs_enabled, .v40_features/.v41_features.referrals_enabled
  (advanced properties: named in `fields`), transport.rdma_enabled;
- GET /api/network/ip/interfaces: name, ip.address, state, enabled, services, rdma_protocols;
- GET /api/storage/volumes: name, state, nas.path, nas.export_policy.name, space.size,
  space.available, files.maximum, files.used;
- GET /api/protocols/nfs/export-policies: name, id, rules (clients[].match, protocols,
  ro_rule, rw_rule, superuser), in index order.
Each with `svm.name` and `fields`; collections are followed through `_links.next`.
HTTPS with the certificate verified (kvprov_storage_ca_bundle, else the system's CAs; off only
with kvprov_storage_validate_certs: false), HTTP basic authentication from the credentials file,
a timeout on every request. Redirects are never followed (a redirect is an error naming where
it pointed): the credentials go to the management address over HTTPS and nowhere else.
"""

from __future__ import annotations

import base64
import json
import posixpath
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kvprov.storage import access, credentials
from kvprov.storage.systems import Client, System
from kvprov.validate.result import FAIL, PASS, WARN, Result

COLLECTIONS = {
    "nfs": ("/api/protocols/nfs/services",
            "enabled,state,protocol.v40_enabled,protocol.v41_enabled,protocol.v4_id_domain,"
            "protocol.v41_features.pnfs_enabled,protocol.v40_features.referrals_enabled,"
            "protocol.v41_features.referrals_enabled,transport.rdma_enabled"),
    "interfaces": ("/api/network/ip/interfaces", "name,ip.address,state,enabled,services,rdma_protocols"),
    "volumes": ("/api/storage/volumes",
                "name,state,nas.path,nas.export_policy.name,space.size,space.available,files.maximum,files.used"),
    "policies": ("/api/protocols/nfs/export-policies", "name,id,rules"),
}
AUTH_FLAVOURS = ("sys", "any")  # export-rule flavours that let AUTH_SYS clients in


class ApiError(Exception):
    """The cluster could not be read; `unreachable`: no answer at all (exit 3)."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


# ---------------------------------------------------------------------------- reading (I/O)

def _host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib would resend the Authorization header to wherever the
    Location points (another host, plain http). The 3xx reaches `Api._get` as an HTTPError."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Api:
    """GET requests to one cluster's REST API."""

    def __init__(self, system: System, creds: credentials.Credentials):
        self.base = f"https://{_host(system.address)}:{system.api_port}"
        self.timeout = system.api_timeout
        self.system = system
        context = ssl.create_default_context(cafile=system.ca_bundle or None)
        if not system.validate_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirect())
        token = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Accept": "application/json"}
        self.username = creds.username

    def records(self, path: str, query: dict[str, str]) -> list[dict]:
        """Every record of a collection (following _links.next)."""
        url: str | None = f"{self.base}{path}?{urllib.parse.urlencode(query)}"
        out: list[dict] = []
        while url:
            data = self._get(url, path)
            out += [r for r in data.get("records") or [] if isinstance(r, dict)]
            href = ((data.get("_links") or {}).get("next") or {}).get("href")
            url = f"{self.base}{href}" if isinstance(href, str) and href.startswith("/") else None
        return out

    def _get(self, url: str, path: str) -> dict:
        if not url.startswith(self.base + "/"):  # the credentials go to the management address only
            raise ApiError(f"{self.base}{path}: refusing to send the credentials to {url}")
        request = urllib.request.Request(url, headers=self.headers)
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as e:
            raise ApiError(self._http_error(e, path)) from None
        except urllib.error.URLError as e:
            raise self._url_error(e.reason) from None
        except (TimeoutError, socket.timeout):
            raise ApiError(f"{self.base}: no answer within {self.timeout}s (kvprov_storage_api_timeout)",
                           unreachable=True) from None
        except ssl.SSLError as e:
            raise self._url_error(e) from None
        try:
            data = json.loads(body)
        except ValueError:
            raise ApiError(f"{self.base}{path}: the answer is not JSON (is this an ONTAP management "
                           "address?)") from None
        if not isinstance(data, dict):
            raise ApiError(f"{self.base}{path}: the answer is not a JSON object")
        return data

    def _http_error(self, e: urllib.error.HTTPError, path: str) -> str:
        try:
            message = (json.loads(e.read() or b"{}").get("error") or {}).get("message") or ""
        except (ValueError, AttributeError):
            message = ""
        said = f" ({message})" if message else ""
        if e.code == 401:
            return (f"{self.base}: authentication failed for user {self.username}{said}: check "
                    f"{self.system.credentials_file}")
        if e.code == 403:
            return (f"{self.base}{path}: user {self.username} may not read it{said}: give the user a read-only "
                    "role that includes this path (docs/storage-check.md)")
        if e.code == 404:
            return f"{self.base}{path}: not found{said} (ONTAP 9.10.1 or later is needed)"
        if 300 <= e.code < 400:
            where = (e.headers.get("Location") if e.headers else None) or "no Location"
            return (f"{self.base}{path}: HTTP {e.code} redirect to {where}: not followed (the credentials go to "
                    "the management address only): set ansible_host and kvprov_storage_api_port to the cluster's "
                    "HTTPS management address")
        return f"{self.base}{path}: HTTP {e.code} {e.reason}{said}"

    def _url_error(self, reason: Any) -> ApiError:
        if isinstance(reason, ssl.SSLCertVerificationError):
            return ApiError(f"{self.base}: the cluster's certificate is not trusted ({reason.verify_message}): give "
                            "the CA that signed it in kvprov_storage_ca_bundle (verification stays on)")
        if isinstance(reason, ssl.SSLError):
            return ApiError(f"{self.base}: TLS failed: {reason}")
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return ApiError(f"{self.base}: no answer within {self.timeout}s (kvprov_storage_api_timeout)",
                            unreachable=True)
        text = getattr(reason, "strerror", None) or str(reason)
        return ApiError(f"{self.base}: cannot connect: {text}", unreachable=True)


def fetch(system: System) -> dict[str, list[dict]]:
    """The SVM's NFS service, LIFs, volumes and export policies. Raises ApiError or
    credentials.CredentialsError."""
    api = Api(system, credentials.read(system.credentials_file))
    return {key: api.records(path, {"svm.name": system.svm, "fields": fields})
            for key, (path, fields) in COLLECTIONS.items()}


def lif_addresses(state: dict[str, list[dict]]) -> list[str]:
    """The addresses of the SVM's data LIFs (what GPU nodes mount through)."""
    return [str(_get(r, "ip.address")) for r in state.get("interfaces", []) if _get(r, "ip.address")]


# ---------------------------------------------------------------------------- judging (pure)

def _get(record: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(record, dict):
            return None
        record = record.get(key)
    return record


def evaluate(system: System, state: dict[str, list[dict]], clients: list[Client]) -> list[Result]:
    """Every ONTAP check of one SVM for the GPU nodes that mount from it."""
    r = lambda *a, **k: access.result(system, *a, **k)  # noqa: E731
    services = state.get("nfs", [])
    if not services:
        return [r("nfs.service", FAIL, f"an NFS service on SVM {system.svm}", "none (no such SVM, or NFS was "
                  "never set up on it)", f"check kvprov_storage_svm; vserver nfs create -vserver {system.svm}")]
    nfs = services[0]
    out = [_service(system, nfs)]
    out += _protocol(system, nfs, clients)
    out += [_lif(system, state.get("interfaces", []), server, [c for c in clients if c.server == server])
            for server in sorted({c.server for c in clients})]
    for export in sorted({c.export for c in clients}):
        out += _export(system, state, export, [c for c in clients if c.export == export])
    return out


def _service(system: System, nfs: dict) -> Result:
    enabled, state = _get(nfs, "enabled"), _get(nfs, "state")
    found = f"enabled: {enabled}, state: {state}"
    if enabled is True and state in (None, "online"):
        return access.result(system, "nfs.service", PASS, "enabled and online", found)
    return access.result(system, "nfs.service", FAIL, "enabled and online", found,
                         f"vserver nfs on -vserver {system.svm}")


def _flag(system: System, nfs: dict, id_: str, field: str, want: bool, what: str, fix: str) -> Result:
    value = _get(nfs, field)
    expected = f"{field}: {str(want).lower()} ({what})"
    if value is None:
        return access.result(system, id_, WARN, expected, f"{field} was not reported (an ONTAP older than the "
                             "property, or a role that may not read it)", "check it by hand: vserver nfs show")
    if value is want:
        return access.result(system, id_, PASS, expected, f"{field}: {str(value).lower()}")
    return access.result(system, id_, FAIL, expected, f"{field}: {str(value).lower()}", fix)


def _protocol(system: System, nfs: dict, clients: list[Client]) -> list[Result]:
    svm = system.svm
    out = [
        _flag(system, nfs, "nfs.v4.1", "protocol.v41_enabled", True, "the GPU nodes mount vers=4.1",
              f"vserver nfs modify -vserver {svm} -v4.1 enabled"),
        _flag(system, nfs, "nfs.v4.0", "protocol.v40_enabled", False,
              "a client that does not pin vers= silently gets 4.0: no pNFS, no sessions",
              f"vserver nfs modify -vserver {svm} -v4.0 disabled"),
    ]
    if any(c.layout != "none" for c in clients):
        out.append(_flag(system, nfs, "nfs.pnfs", "protocol.v41_features.pnfs_enabled", True,
                         "the GPU nodes expect pNFS layouts", f"vserver nfs modify -vserver {svm} -v4.1-pnfs enabled"))
    for version in ("40", "41"):
        out.append(_flag(system, nfs, f"nfs.v{version[0]}.{version[1]}.referrals",
                         f"protocol.v{version}_features.referrals_enabled", False,
                         "referrals send clients to another LIF than the one they mount through",
                         f"set -privilege advanced; vserver nfs modify -vserver {svm} "
                         f"-v{version[0]}.{version[1]}-referrals disabled"))
    out.append(_id_domain(system, nfs, clients))
    if any(c.rdma for c in clients):
        out.append(_flag(system, nfs, "nfs.rdma", "transport.rdma_enabled", True,
                         "the GPU nodes mount proto=rdma", f"vserver nfs modify -vserver {svm} -rdma enabled"))
    return out


def _id_domain(system: System, nfs: dict, clients: list[Client]) -> Result:
    domain = _get(nfs, "protocol.v4_id_domain")
    wanted = sorted({c.idmap_domain for c in clients})
    expected = f"protocol.v4_id_domain equal to the GPU nodes' kvprov_storage_idmap_domain ({', '.join(wanted)})"
    if domain is None:
        return access.result(system, "nfs.id_domain", WARN, expected, "protocol.v4_id_domain was not reported",
                             "check it by hand: vserver nfs show -fields v4-id-domain")
    bad = [c.host for c in clients if c.idmap_domain.lower() != str(domain).lower()]
    if bad:
        return access.result(system, "nfs.id_domain", FAIL, expected,
                             f"{domain}; differs on {', '.join(bad)} (their files would be owned by nobody)",
                             f"vserver nfs modify -vserver {system.svm} -v4-id-domain <domain>, or set "
                             "kvprov_storage_idmap_domain to it and deploy")
    return access.result(system, "nfs.id_domain", PASS, expected, str(domain))


def _lif(system: System, interfaces: list[dict], server: str, clients: list[Client]) -> Result:
    id_ = f"lif.{server}"
    hosts = ", ".join(c.host for c in clients)
    rdma = any(c.rdma for c in clients)
    expected = f"a data LIF of SVM {system.svm} at {server}, up" + (", with RDMA (roce)" if rdma else "")
    lif = next((i for i in interfaces if str(_get(i, "ip.address") or "").lower() == server.strip("[]").lower()), None)
    if lif is None:
        return access.result(system, id_, FAIL, expected, f"no LIF of SVM {system.svm} has address {server} "
                             f"(mounted by {hosts})", "set kvprov_storage_server to a data LIF of the SVM")
    name = _get(lif, "name")
    problems = []
    if _get(lif, "state") not in (None, "up") or _get(lif, "enabled") is False:
        problems.append(f"state {_get(lif, 'state')}, enabled {_get(lif, 'enabled')}")
    services = _get(lif, "services")
    if isinstance(services, list) and "data_nfs" not in services:
        problems.append(f"service policy without data_nfs ({', '.join(services) or 'none'})")
    protocols = _get(lif, "rdma_protocols") or []
    if rdma and "roce" not in protocols:
        problems.append(f"rdma_protocols {protocols or '[]'}")
    found = f"LIF {name} ({server}): " + ("; ".join(problems) if problems else
                                          f"up{', rdma_protocols ' + str(protocols) if rdma else ''}")
    if problems:
        fix = (f"network interface modify -vserver {system.svm} -lif {name} -rdma-protocols roce"
               if rdma and "roce" not in protocols else
               f"network interface modify -vserver {system.svm} -lif {name} -status-admin up "
               "(and a service policy with data-nfs)")
        return access.result(system, id_, FAIL, expected, found + f" (mounted by {hosts})", fix)
    return access.result(system, id_, PASS, expected, found)


def _volume_of(volumes: list[dict], export: str) -> dict | None:
    """The volume whose junction path is the export or holds it (the longest such path)."""
    best, best_len = None, -1
    for v in volumes:
        path = _get(v, "nas.path")
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        path = posixpath.normpath(path)
        if (export == path or export.startswith(path.rstrip("/") + "/")) and len(path) > best_len:
            best, best_len = v, len(path)
    return best


def _export(system: System, state: dict, export: str, clients: list[Client]) -> list[Result]:
    hosts = ", ".join(c.host for c in clients)
    volume = _volume_of(state.get("volumes", []), posixpath.normpath(export))
    if volume is None:
        return [access.result(system, f"volume.{export}.online", FAIL, f"a volume of SVM {system.svm} "
                              f"mounted at {export}", f"no volume's junction path holds {export} (mounted by "
                              f"{hosts})", f"volume mount -vserver {system.svm} -volume <vol> -junction-path "
                              f"{export}, or fix kvprov_storage_export")]
    name = _get(volume, "name")
    vstate = _get(volume, "state")
    out = [access.result(system, f"volume.{export}.online", PASS if vstate == "online" else FAIL,
                         "online", f"volume {name}: {vstate}",
                         "" if vstate == "online" else f"volume online -vserver {system.svm} -volume {name}")]
    files, used = _get(volume, "files.maximum"), _get(volume, "files.used")
    out += access.capacity(system, export, _get(volume, "space.size"), _get(volume, "space.available"),
                           files, files - used if isinstance(files, int) and isinstance(used, int) else None,
                           f"volume {name}")
    policy_name = _get(volume, "nas.export_policy.name")
    policy = next((p for p in state.get("policies", []) if _get(p, "name") == policy_name), None)
    if policy is None:
        out.append(access.result(system, f"export.{export}.access", FAIL,
                                 "an export policy with a rule for every GPU node",
                                 f"volume {name}'s export policy {policy_name} was not found",
                                 f"volume modify -vserver {system.svm} -volume {name} -policy <policy>"))
        return out
    rules = sorted((r for r in _get(policy, "rules") or [] if isinstance(r, dict)),
                   key=lambda r: _get(r, "index") or 0)
    out.append(access.access_result(
        system, export, clients, lambda c: _rule_verdict(rules, c),
        f"vserver export-policy rule create -vserver {system.svm} -policyname {policy_name} -clientmatch "
        "<the GPU nodes' network> -protocol nfs4 -rorule sys -rwrule sys -superuser sys (rules apply in index "
        "order: the first that matches a client decides)"))
    return out


def _rule_verdict(rules: list[dict], client: Client) -> tuple[bool | None, str]:
    """The first rule that matches the client (ONTAP's order) and whether it grants AUTH_SYS
    read, write and superuser over NFSv4."""
    for rule in rules:
        protocols = _get(rule, "protocols") or ["any"]
        if not any(p in ("any", "nfs", "nfs4") for p in protocols):
            continue
        specs = [str(_get(c, "match")) for c in _get(rule, "clients") or [] if _get(c, "match")]
        verdicts = [access.matches(s, client.address) for s in specs]
        if not any(v is not False for v in verdicts):
            continue
        index = _get(rule, "index")
        if True not in verdicts:
            return None, f"rule {index} ({', '.join(specs)}) may apply"
        missing = [k for k in ("ro_rule", "rw_rule", "superuser")
                   if not any(f in AUTH_FLAVOURS for f in _get(rule, k) or [])]
        if missing:
            return False, f"rule {index} ({', '.join(specs)}) has no sys/any in {', '.join(missing)}"
        return True, f"rule {index} ({', '.join(specs)})"
    return False, "no rule of the policy matches it"
