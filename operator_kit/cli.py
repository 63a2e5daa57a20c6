"""The operator's own command line: ``python -m my_operator [flags]`` (`Operator.main`).

A plain run connects to the cluster, runs the controllers (under the Lease, if the
operator elects a leader) until SIGTERM or SIGINT, and serves, as controller-runtime's
managers do, the probes and the metrics on ports of their own:

- ``--namespace NS`` (``OPERATOR_KIT_NAMESPACE``): where the operator runs; default: the
  pod's, or the kubeconfig context's.
- ``--watch-namespace NS[,NS...]`` (``OPERATOR_KIT_WATCH_NAMESPACE``), repeatable: the
  namespaces to watch; default: all namespaces.
- ``--kubeconfig PATH[:PATH...]`` (``KUBECONFIG``): default: in-cluster, else
  ``~/.kube/config``; several files are merged as kubectl merges them.
- ``--log-level LEVEL`` (``OPERATOR_KIT_LOG_LEVEL``): debug, info (default), warning,
  error, critical.
- ``--log-format text|json`` (``OPERATOR_KIT_LOG_FORMAT``): default: text; json has zap's
  keys, as controller-runtime's operators (`operator_kit.logs`). The client libraries'
  DEBUG lines only with ``OPERATOR_KIT_LOG_LIBRARIES=1``.
- ``--zap-log-level LEVEL`` and ``--zap-encoder console|json``: kubebuilder's names for
  the two above, so its Deployments' args work unchanged; zap's level names (``warn``,
  ``dpanic``, ``panic``, ``fatal``) and a verbosity above 0 (debug) are accepted there,
  ``console`` is text.
- ``--health-probe-bind-address ADDR`` (``OPERATOR_KIT_HEALTH_PROBE_BIND_ADDRESS``):
  default ``:8081`` in a pod, else ``127.0.0.1:8081``.
- ``--metrics-bind-address ADDR`` (``OPERATOR_KIT_METRICS_BIND_ADDRESS``): default
  ``:8080`` in a pod, else ``127.0.0.1:8080``.
- ``--metrics-secure`` / ``--no-metrics-secure`` (``OPERATOR_KIT_METRICS_SECURE``, a yes or
  no): serve ``/metrics`` over HTTPS, only to requests whose bearer token the API server
  allows to ``get /metrics`` (TokenReview, SubjectAccessReview; `operator_kit.probes`);
  default: no. Under gunicorn the variable guards ``/metrics`` on the TLS port.
- ``--metrics-cert-dir DIR`` (``OPERATOR_KIT_METRICS_CERT_DIR``): the ``tls.crt`` and
  ``tls.key`` the secure metrics server serves; default: a self-signed pair made at start.
- ``--leader-elect`` / ``--no-leader-elect`` (``OPERATOR_KIT_LEADER_ELECT``, a yes or
  no): run the controllers only while this replica holds the Lease, or at once; default:
  as the Operator declares (``leader_election``). ``--leader-elect`` on an Operator that
  declares none elects with `LeaderElection`'s defaults; an Operator that shards needs it.
- ``--insecure-kubeconfig CATEGORY[,...]`` (``OPERATOR_KIT_INSECURE_KUBECONFIG``),
  repeatable: what a kubeconfig that does not come from the operator's own files (a
  fleet's kubeconfig Secret) may carry: ``exec``, ``auth-provider``, ``files``,
  ``proxy``, ``insecure-tls`` (`operator_kit.client.kubeconfig_risks`); default: none.
  Whoever may write such a kubeconfig then runs commands in the operator, or reads its
  files.
- ``--manifests ...``: print the manifests and exit (the flags of
  ``python -m operator_kit.manifests`` follow it).
- ``--help``, ``--version``.

``--namespace`` is where the operator itself runs (its Lease and webhook Secret live
there), as for ``--manifests --namespace``; ``--watch-namespace`` restricts the
controllers of namespaced kinds that would otherwise watch every namespace (several
namespaces: one watch per namespace, `Controller.watch_namespaces`). An address
is ``HOST:PORT`` or ``:PORT`` (every interface); ``0`` turns that server off; both flags
may name one address, which then serves all three paths. The probe server answers
``/livez`` and ``/readyz``, the metrics server ``/metrics``, with the same views gunicorn
serves on the webhook port (`Operator.webhooks`).

Under gunicorn (``OPERATOR_KIT_APP=... gunicorn operator_kit.webhooks:app``) the same
environment variables set the namespaces, the log level and the format
(`apply_environment`, `operator_kit.gunicorn_conf`); the probes and metrics are then on
gunicorn's port. Both ways log alike (`operator_kit.logs`).

Bad input — an unknown flag, a bad value (flag or environment), a kubeconfig that does
not exist, an address already in use — is one line on stderr that names the problem and
the fix, and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import configparser
import importlib.metadata
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NoReturn

from operator_kit import logs
from operator_kit._version import __version__ as kit_version
from operator_kit.client.kubeconfig import split as kubeconfig_paths
from operator_kit.client.kubeconfig_risks import RISKS, check_categories
from operator_kit.election.leader import LeaderElection
from operator_kit.probes import HttpServer, ProbeApp, metrics_tls
from operator_kit.settings import (
    ENV,
    LOG_LIBRARIES_ENV,
    METRICS_PORT,
    NAME_ENV,
    PROBE_PORT,
    Address,
    ArgumentParser,
    Settings,
    UsageError,
    check_name,
    env_bool,
    env_names,
    env_text,
    namespace_list,
    parse_address,
)

if TYPE_CHECKING:
    from operator_kit.operator import Operator

__all__ = ["Address", "Settings", "UsageError", "apply_environment", "main", "parse"]

log = logging.getLogger("operator_kit.cli")

class _Exit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(ArgumentParser):
    """argparse that reports instead of exiting, so `main` decides the one line and code."""

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _Exit(status)


def _parser(prog: str, version: str) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog, description="Run the operator: its controllers, the probes and the "
        "metrics, until SIGTERM or SIGINT.",
        epilog="Each flag's environment variable is used when the flag is not given. "
        "Under gunicorn the probes and metrics are on gunicorn's port instead.")
    parser.add_argument("--version", action="version", version=version)
    parser.add_argument("--namespace", metavar="NS", help="the namespace the operator runs "
                        f"in: its Lease and webhook Secret live there (${ENV['namespace']}; "
                        "default: the pod's, or the kubeconfig context's)")
    parser.add_argument("--watch-namespace", metavar="NS[,NS...]", action="append",
                        help="watch only these namespaces; repeat it or join names with "
                        f"commas (${ENV['watch_namespace']}; default: all namespaces)")
    parser.add_argument("--kubeconfig", metavar="PATH", help="the cluster to connect to "
                        "($KUBECONFIG; default: in-cluster, else ~/.kube/config)")
    parser.add_argument("--log-level", metavar="LEVEL", help=f"{', '.join(logs.LEVELS)} "
                        f"(${ENV['log_level']}; default: info)")
    parser.add_argument("--log-format", metavar="FORMAT", help="text, or json for one "
                        f"object per line (${ENV['log_format']}; default: text)")
    parser.add_argument("--zap-log-level", metavar="LEVEL", help="--log-level by "
                        "kubebuilder's name: zap's levels (debug, info, warn, error, panic) "
                        "or a verbosity above 0 (debug)")
    parser.add_argument("--zap-encoder", metavar="ENCODER", help="--log-format by "
                        "kubebuilder's name: console (text) or json")
    parser.add_argument("--health-probe-bind-address", metavar="ADDR", help="where /livez "
                        f"and /readyz are served; 0 turns it off "
                        f"(${ENV['health_probe_bind_address']}; default: :{PROBE_PORT} in a "
                        f"pod, else 127.0.0.1:{PROBE_PORT})")
    parser.add_argument("--metrics-bind-address", metavar="ADDR", help="where /metrics is "
                        f"served; 0 turns it off (${ENV['metrics_bind_address']}; default: "
                        f":{METRICS_PORT} in a pod, else 127.0.0.1:{METRICS_PORT})")
    parser.add_argument("--metrics-secure", action=argparse.BooleanOptionalAction,
                        help="serve /metrics over HTTPS, only to bearer tokens the API "
                        "server allows to get /metrics (TokenReview, SubjectAccessReview) "
                        f"(${ENV['metrics_secure']}, a yes or no; default: no)")
    parser.add_argument("--metrics-cert-dir", metavar="DIR", help="tls.crt and tls.key for "
                        f"--metrics-secure (${ENV['metrics_cert_dir']}; default: a "
                        "self-signed certificate made at start)")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction,
                        help="run the controllers only while this replica holds the Lease "
                        f"(${ENV['leader_elect']}, a yes or no; default: as the operator "
                        "declares)")
    parser.add_argument("--insecure-kubeconfig", metavar="CATEGORY[,...]", action="append",
                        help="allow kubeconfigs not from the operator's files (a fleet's "
                        f"Secrets) to carry these: {', '.join(RISKS)}; whoever writes them "
                        f"then runs commands in the operator (${ENV['insecure_kubeconfig']}"
                        "; default: none)")
    parser.add_argument("--manifests", nargs=argparse.REMAINDER, metavar="...",
                        help="print the operator's manifests (for kubectl apply -f -) and "
                        "exit; what follows are the flags of python -m operator_kit.manifests")
    return parser


def parse(argv: list[str], *, prog: str = "operator", version: str = "",
          environ: dict[str, str] | None = None) -> Settings:
    """The settings `argv` and `environ` (default: os.environ) ask for; `UsageError` for
    bad input. Raises `_Exit` after ``--help`` or ``--version`` was printed."""
    env = os.environ if environ is None else environ
    args = _parser(prog, version).parse_args(argv)
    if args.manifests is not None:
        return Settings(manifests=list(args.manifests))

    def value(name: str) -> tuple[str | None, str]:
        flag = "--" + name.replace("_", "-")
        given = getattr(args, name)
        if given is not None:
            return given, flag
        return env.get(ENV[name]) or None, ENV[name]

    _zap_aliases(args)

    level, where = value("log_level")
    if level is not None:
        try:
            logs.parse_level(level)
        except ValueError:
            raise UsageError(f"{where} {level!r} is not a log level; use one of "
                             f"{', '.join(logs.LEVELS)}") from None
    fmt, fmt_where = value("log_format")
    if fmt is not None and fmt not in logs.FORMATS:
        raise UsageError(f"{fmt_where} {fmt!r} is not a log format; use text or json")
    libraries = env_bool(LOG_LIBRARIES_ENV, False, env)
    leader_elect = args.leader_elect if args.leader_elect is not None else _env_yes_no(
        ENV["leader_elect"], env)
    kubeconfig, kube_where = value("kubeconfig")
    if kubeconfig is not None:
        _check_kubeconfig(kubeconfig, kube_where)
    env_names(env, namespaces=False)  # NAME_ENV's: `apply_environment` sets them
    namespace, where = value("namespace")
    if namespace is not None:
        check_name(namespace, where, what="a namespace name")
    watched = (",".join(args.watch_namespace) if args.watch_namespace
               else env.get(ENV["watch_namespace"]) or None)
    watch_namespaces = () if watched is None else namespace_list(
        watched, "--watch-namespace" if args.watch_namespace else ENV["watch_namespace"])
    metrics_secure = bool(args.metrics_secure if args.metrics_secure is not None
                          else _env_yes_no(ENV["metrics_secure"], env))
    cert_dir, cert_where = value("metrics_cert_dir")
    if cert_dir is not None:
        missing = [f for f in ("tls.crt", "tls.key")
                   if not os.path.isfile(os.path.join(cert_dir, f))]
        if missing:
            raise UsageError(f"{cert_where} {cert_dir}: no {' or '.join(missing)} there; "
                             "give the folder a kubernetes.io/tls Secret is mounted in, or "
                             "leave it unset for a self-signed certificate")
        if not metrics_secure:
            raise UsageError(f"{cert_where} {cert_dir}: only --metrics-secure serves a "
                             "certificate; add --metrics-secure, or drop it")
    insecure = _insecure_kubeconfig(args.insecure_kubeconfig, env)
    in_pod = bool(env.get("KUBERNETES_SERVICE_HOST"))
    addresses = []
    for name, port in (("health_probe_bind_address", PROBE_PORT),
                       ("metrics_bind_address", METRICS_PORT)):
        text, from_ = value(name)
        if text is None:
            text = f":{port}" if in_pod else f"127.0.0.1:{port}"
        addresses.append(parse_address(text, from_))
    return Settings(namespace=namespace, watch_namespaces=watch_namespaces,
                    kubeconfig=kubeconfig, log_level=(level or "info").lower(),
                    log_format=fmt or "text", log_libraries=libraries,
                    health_probe_bind_address=addresses[0],
                    metrics_bind_address=addresses[1], leader_elect=leader_elect,
                    metrics_secure=metrics_secure, metrics_cert_dir=cert_dir,
                    insecure_kubeconfig=insecure)


def _insecure_kubeconfig(flags: list[str] | None, environ: Mapping[str, str]
                         ) -> tuple[str, ...]:
    """The categories ``--insecure-kubeconfig`` (or its variable) allows, checked."""
    where = "--insecure-kubeconfig" if flags else ENV["insecure_kubeconfig"]
    text = ",".join(flags) if flags else (env_text(ENV["insecure_kubeconfig"], environ) or "")
    try:
        return tuple(sorted(check_categories(text.split(","), where)))
    except ValueError as err:
        raise UsageError(str(err)) from None


# zap's level names that Python's logging calls otherwise (controller-runtime's --zap-*).
_ZAP_LEVELS = {"warn": "warning", "dpanic": "critical", "panic": "critical",
               "fatal": "critical"}


def _zap_aliases(args: argparse.Namespace) -> None:
    """``--zap-log-level`` and ``--zap-encoder`` (kubebuilder's flags) as ``--log-level``
    and ``--log-format``; `UsageError` for a value zap would refuse, or for both names of
    one setting given."""
    for zap, own in (("zap_log_level", "log_level"), ("zap_encoder", "log_format")):
        given = getattr(args, zap)
        if given is None:
            continue
        flag, own_flag = "--" + zap.replace("_", "-"), "--" + own.replace("_", "-")
        if getattr(args, own) is not None:
            raise UsageError(f"{own_flag} and {flag}: one setting given twice; keep one "
                             f"({flag} is kubebuilder's name for {own_flag})")
        name = given.strip().lower()
        if zap == "zap_encoder":
            if name not in ("console", "json"):
                raise UsageError(f"{flag} {given!r} is not a zap encoder; use console "
                                 "(text) or json")
            args.log_format = "text" if name == "console" else name
        elif name in logs.LEVELS or name in _ZAP_LEVELS:
            args.log_level = _ZAP_LEVELS.get(name, name)
        elif name.isdigit() and int(name) > 0:
            args.log_level = "debug"  # zap's verbosity V(n): more than info
        else:
            raise UsageError(f"{flag} {given!r} is not a log level; use one of debug, "
                             "info, warn, error, panic, or a verbosity above 0 (debug)")


def _env_yes_no(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """Variable `name` as a yes or no (`env_bool`), None when it is unset or blank."""
    return None if env_text(name, environ) is None else env_bool(name, False, environ)


def _check_kubeconfig(value: str, where: str) -> None:
    """A list (a:b) is merged as kubectl merges it: missing files are skipped, so only a
    list where no file exists is an error; a directory is not a kubeconfig file."""
    paths = kubeconfig_paths(value)
    if any(os.path.isfile(p) for p in paths):
        return
    folders = [p for p in paths if os.path.isdir(p)]
    if len(paths) <= 1:
        what = "is a directory, not a kubeconfig file" if folders else "no such file"
    elif folders:
        what = f"none of these is a kubeconfig file ({', '.join(folders)}: a directory)"
    else:
        what = "none of these files exists"
    raise UsageError(f"{where} {value}: {what}; point it at the cluster's kubeconfig "
                     "(python -m operator_kit.localcluster up prints one), or leave it "
                     "unset to use in-cluster or ~/.kube/config")


def apply_environment(operator: Operator, settings: Settings | None = None) -> None:
    """Give `operator` the namespaces and kubeconfig the settings (by default: the
    environment variables, as under gunicorn) name, and the names of its webhook Service
    and configurations that the environment gives (`NAME_ENV`); `UsageError` for a
    variable that is not a valid name (`operator_kit.settings.env_names`)."""
    names = env_names(namespaces=settings is None)
    if settings is None:
        listed = names.get("watch_namespace")
        settings = Settings(namespace=names.get("namespace"),
                            watch_namespaces=tuple(listed.split(",")) if listed else (),
                            leader_elect=_env_yes_no(ENV["leader_elect"]),
                            metrics_secure=env_bool(ENV["metrics_secure"], False),
                            insecure_kubeconfig=_insecure_kubeconfig(None, os.environ))
    if settings.leader_elect is False and operator.sharding is not None:
        raise UsageError(f"--no-leader-elect ({ENV['leader_elect']}=0): operator "
                         f"{operator.name} shards its objects, and the elected replica "
                         "assigns them; drop the flag or the variable")
    if settings.leader_elect is not None:
        operator.leader_election = (operator.leader_election or LeaderElection()
                                    if settings.leader_elect else None)
    operator.metrics_secure = settings.metrics_secure
    operator.insecure_kubeconfig = frozenset(settings.insecure_kubeconfig)
    if settings.namespace:
        operator.namespace = settings.namespace
    if settings.kubeconfig:
        operator.kubeconfig = settings.kubeconfig
    watched = settings.watch_namespaces
    if watched:  # one informer per namespace (`Controller.watch_namespaces`)
        for controller in operator.controllers:
            if controller.namespace is None and controller.primary_kind().namespaced is not False:
                controller.namespace = watched[0] if len(watched) == 1 else list(watched)
    for attribute in NAME_ENV:
        if attribute in names:
            setattr(operator, attribute, names[attribute])


def servers(operator: Operator, settings: Settings) -> list[HttpServer]:
    """Bind the probe and metrics servers (one, when both name the same address); the
    metrics one over TLS when they are secure (`operator_kit.probes.metrics_tls`). Plain
    WSGI (`ProbeApp`): an operator without webhooks never imports Flask."""
    if (settings.metrics_secure and settings.metrics_bind_address is not None
            and settings.metrics_bind_address == settings.health_probe_bind_address):
        raise UsageError(f"--metrics-secure: --metrics-bind-address "
                         f"{settings.metrics_bind_address} is the probes' address too, and "
                         "the kubelet probes over plain HTTP; give the metrics an address "
                         "of their own")

    groups: dict[Address, list[tuple[str, str, list[str]]]] = {}
    for address, what, flag, paths in (
            (settings.health_probe_bind_address, "probes", "--health-probe-bind-address",
             ["livez", "readyz"]),
            (settings.metrics_bind_address, "metrics", "--metrics-bind-address", ["metrics"])):
        if address is not None:
            groups.setdefault(address, []).append((what, flag, paths))
    bound: list[HttpServer] = []
    try:
        for address, parts in groups.items():
            what = " and ".join(part[0] for part in parts)
            app = ProbeApp([path for part in parts for path in part[2]], live=operator.live,
                           ready=operator.ready, metrics_auth=operator.metrics_auth,
                           detail=operator.ready_detail)
            tls = (metrics_tls(settings.metrics_cert_dir, operator.name)
                   if settings.metrics_secure and parts[0][0] == "metrics" else None)
            bound.append(HttpServer(what, address, parts[0][1], app, tls))
    except UsageError:
        for server in bound:
            server.stop()
        raise
    return bound


# -- main --------------------------------------------------------------------------------

def _program(app: str | None = None) -> tuple[str, str]:
    """(how the user ran us, the operator's module or ""): under ``python -m
    operator_kit MODULE:ATTR`` (`app`) that MODULE, not operator_kit."""
    if app:
        return f"python -m operator_kit {app}", app.partition(":")[0]
    module = sys.modules.get("__main__")
    spec = getattr(getattr(module, "__spec__", None), "name", None)
    if spec:
        name = spec.removesuffix(".__main__")
        return f"python -m {name}", name
    return os.path.basename(sys.argv[0]) or "operator", ""


def _version(operator: Operator, module: str) -> str:
    """``<operator> <its package's version> (operator_kit <version>)``. The package's
    version is its ``__version__``, else the one its checkout declares (a pyproject.toml
    or setup.cfg beside it or one folder up, as on PYTHONPATH), else the installed
    distribution's; "(unknown version)" when none says."""
    package = module.partition(".")[0]
    found = None
    if package:
        imported = sys.modules.get(package)
        found = getattr(imported, "__version__", None) or _checkout_version(
            getattr(imported, "__file__", None))
        for dist in importlib.metadata.packages_distributions().get(package, []):
            if found:
                break
            try:
                found = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
    return f"{operator.name} {found or '(unknown version)'} (operator_kit {kit_version})"


# pyproject.toml's [project] table, and its static version (Python 3.10 has no tomllib)
_PROJECT_TABLE = re.compile(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", re.M | re.S)
_VERSION_KEY = re.compile(r"""^version\s*=\s*["']([^"'\n]+)["']""", re.M)


def _checkout_version(init_file: str | None) -> str | None:
    """The version the project around a package's ``__init__.py`` declares: the nearest
    pyproject.toml's ``[project] version``, else setup.cfg's ``[metadata] version``, in
    the package's parent folder (``src/``-less layout) or the one above (``src/``)."""
    if not init_file:
        return None
    folder = os.path.dirname(os.path.dirname(os.path.abspath(init_file)))
    for project in (folder, os.path.dirname(folder)):
        try:
            with open(os.path.join(project, "pyproject.toml"), encoding="utf-8") as file:
                section = _PROJECT_TABLE.search(file.read())
        except (OSError, UnicodeDecodeError):
            section = None
        found = _VERSION_KEY.search(section.group(1)) if section else None
        if found:
            return found.group(1)
        config = configparser.ConfigParser()
        try:
            config.read(os.path.join(project, "setup.cfg"), encoding="utf-8")
        except configparser.Error:
            continue
        version = config.get("metadata", "version", fallback="").strip()
        if version and not version.startswith(("attr:", "file:")):
            return version
    return None


def main(operator: Operator, argv: list[str] | None = None,
         run: Callable[[], int] | None = None, *, app: str | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), then print the manifests or run `operator`
    with its probe and metrics servers. Returns the exit code. `app` is the
    ``MODULE:ATTR`` the operator was loaded from, under ``python -m operator_kit``."""
    prog, module = _program(app)
    args = sys.argv[1:] if argv is None else argv
    try:
        settings = parse(args, prog=prog, version=_version(operator, module))
    except _Exit as done:
        return done.status
    except UsageError as err:
        return _usage(prog, err)
    if settings.manifests is not None:
        from operator_kit.manifests._command import run as manifests

        return manifests(settings.manifests, operator=operator,
                         app=app or f"{module or 'main'}:operator",
                         prog=f"{prog} --manifests")
    logs.configure(settings.log_level, settings.log_format,
                   libraries=settings.log_libraries)
    try:
        apply_environment(operator, settings)
        _check_connection_settings(operator)
        bound = servers(operator, settings)
    except UsageError as err:
        return _usage(prog, err)
    for server in bound:
        server.start()
    try:
        return (run or operator.run)()
    finally:
        for server in bound:
            server.stop()


def _check_connection_settings(operator: Operator) -> None:
    """Load the kubeconfig now (no request is sent), so a bad one is a usage error."""
    from kubernetes.config import ConfigException

    from operator_kit.client.transport import ConfigurationError

    try:
        operator.api  # noqa: B018 - builds the ApiClient from the configuration
    except (ConfigurationError, ConfigException) as err:
        raise UsageError(f"{_one_line(err)}") from None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _usage(prog: str, err: UsageError) -> int:
    print(f"{prog}: error: {_one_line(err)}", file=sys.stderr)
    return 2
