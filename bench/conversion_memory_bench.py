"""Webhook memory per request body byte: what a ConversionReview of N MiB costs the worker.

Run: ``python bench/conversion_memory_bench.py`` (options: ``--help``).

For each size, a fresh ``gunicorn -c python:operator_kit.gunicorn_conf`` (1 gthread
worker, 8 threads, TLS, 127.0.0.1) serves a conversion webhook for a typed kind (the full
check: every object decoded as its version class) whose handler reshapes the spec, as a
real conversion does. The worker's RSS is read once it has answered a small review
(``base``), then one ConversionReview of ``size`` MiB (objects of ~1.5 KiB with
managedFields, as the API server sends them) is sent ``--concurrency`` times at once and
answered; ``peak`` is the worker's VmHWM after it (the high-water mark of its resident
memory), ``after`` its RSS once the answers are in. ``per byte`` = (peak - base) / (size x
concurrency): the figure the generated memory limit is derived from
(`operator_kit.manifests._deploy`, docs/how-to/webhooks.md).

Also an admission review (``--admission``): an UPDATE carrying the object twice.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operator_kit.api.resources import CustomResource
from operator_kit.testing import stop_process
from operator_kit.webhooks.certificates import WebhookCertificate
from operator_kit.webhooks.server import AdmissionRequest, Webhooks

MIB = 1024 * 1024


@dataclass
class ItemSpec:
    size: int
    owner: str = ""
    tags: dict[str, str] | None = None


class Item(CustomResource):
    group = "bench.operator-kit.test"
    version = "v1"
    kind = "Item"
    spec: ItemSpec


@dataclass
class ItemSpecV2:
    capacity: int
    owner: str = ""
    tags: dict[str, str] | None = None


class ItemV2(CustomResource, version_of=Item):
    version = "v2"
    spec: ItemSpecV2


webhooks = Webhooks(max_body_bytes=64 * MIB, max_conversion_body_bytes=256 * MIB)


@webhooks.convert("/convert", kind=Item)
def convert(obj: dict[str, Any], desired_api_version: str) -> dict[str, Any]:
    spec = dict(obj["spec"])
    if desired_api_version == ItemV2.api_version():
        spec["capacity"] = spec.pop("size")
    else:
        spec["size"] = spec.pop("capacity")
    return {**obj, "spec": spec}


@webhooks.validate(Item, "/validate")
def validate(request: AdmissionRequest[Item]) -> None:
    return None


def item(i: int) -> dict[str, Any]:
    """One object as the API server sends it: ~1.5 KiB of JSON."""
    return {
        "apiVersion": Item.api_version(), "kind": "Item",
        "metadata": {
            "name": f"item-{i:06d}", "namespace": "production", "uid": f"uid-{i:032d}",
            "resourceVersion": str(100000 + i), "generation": 3,
            "creationTimestamp": "2026-01-01T10:00:00Z",
            "labels": {"app.kubernetes.io/name": "inventory", "team": "payments",
                       "tier": "backend"},
            "annotations": {"example.com/owner": "payments@example.com"},
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": Item.api_version(), "time": "2026-01-01T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:team": {}, "f:tier": {}}},
                             "f:spec": {".": {}, "f:size": {}, "f:owner": {}, "f:tags": {}}},
            }],
        },
        "spec": {"size": i % 100, "owner": "payments",
                 "tags": {f"key-{k}": f"value-{k}-{i}" for k in range(8)}},
    }


def conversion_review(size: int) -> bytes:
    one = len(json.dumps(item(0))) + 2
    objects = [item(i) for i in range(max(1, size // one))]
    return json.dumps({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": ItemV2.api_version(),
                    "objects": objects}}).encode()


def admission_review(size: int) -> bytes:
    obj = item(0)
    obj["spec"]["tags"] = {f"key-{k:07d}": "v" * 40 for k in range(size // 2 // 60)}
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "a-1", "operation": "UPDATE", "name": "item-000000",
                    "namespace": "production",
                    "kind": {"group": Item.group, "version": "v1", "kind": "Item"},
                    "resource": {"group": Item.group, "version": "v1", "resource": "items"},
                    "userInfo": {"username": "bench"}, "object": obj,
                    "oldObject": obj}}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


class Server:
    def __init__(self, tmp: Path) -> None:
        cert = WebhookCertificate.generate_for("localhost", ["localhost"],
                                               ip_addresses=["127.0.0.1"])
        files = cert.install(tmp / "tls", point_server=False)
        self.context = ssl.create_default_context(cafile=str(files.ca))
        self.port = free_port()
        env = {**os.environ, "OPERATOR_KIT_APP": f"{Path(__file__).stem}:webhooks",
               "OPERATOR_KIT_TLS_DIR": str(tmp / "tls"),
               "OPERATOR_KIT_BIND": f"127.0.0.1:{self.port}",
               "OPERATOR_KIT_LOG_LEVEL": "warning", "OPERATOR_KIT_READ_TIMEOUT": "60",
               "OPERATOR_KIT_WRITE_TIMEOUT": "60",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
        for name in ("OPERATOR_KIT_TLS_CERT", "OPERATOR_KIT_TLS_KEY"):
            env.pop(name, None)
        self.log = (tmp / "gunicorn.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:operator_kit.gunicorn_conf"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.post("/convert", conversion_review(2000))
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.2)
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        self.worker = int(children.read_text().split()[0])

    def post(self, path: str, body: bytes) -> int:
        connection = http.client.HTTPSConnection("localhost", self.port,
                                                 context=self.context, timeout=300)
        try:
            connection.request("POST", path, body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()


def measure(size_mib: float, concurrency: int, path: str) -> dict[str, float]:
    body = (admission_review if path == "/validate" else conversion_review)(int(size_mib * MIB))
    with tempfile.TemporaryDirectory(prefix="okmem-") as tmp:
        server = Server(Path(tmp))
        try:
            time.sleep(0.5)
            base = status_kib(server.worker, "VmRSS")
            statuses: list[int] = []
            started = time.perf_counter()
            threads = [threading.Thread(target=lambda: statuses.append(server.post(path, body)),
                                        name=f"client-{i}") for i in range(concurrency)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - started
            peak = status_kib(server.worker, "VmHWM")
            after = status_kib(server.worker, "VmRSS")
        finally:
            server.stop()
    assert statuses == [200] * concurrency, statuses
    grown = (peak - base) * 1024
    return {"bytes": len(body), "base": base / 1024, "peak": peak / 1024,
            "after": after / 1024, "seconds": seconds,
            "per_byte": grown / (len(body) * concurrency)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,2,4,8,16", help="MiB, comma-separated")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--admission", action="store_true",
                        help="an UPDATE AdmissionReview instead of a ConversionReview")
    args = parser.parse_args(argv)
    path = "/validate" if args.admission else "/convert"
    print(f"{path}, {args.concurrency} at once; RSS of the worker in MiB")
    print(f"{'body MiB':>9} {'base':>7} {'peak':>7} {'after':>7} {'seconds':>8} {'per byte':>9}")
    for size in (float(s) for s in args.sizes.split(",")):
        r = measure(size, args.concurrency, path)
        print(f"{r['bytes'] / MIB:9.2f} {r['base']:7.1f} {r['peak']:7.1f} {r['after']:7.1f} "
              f"{r['seconds']:8.2f} {r['per_byte']:9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
