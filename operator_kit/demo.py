"""``python -m operator_kit.demo``: show that the cluster in KUBECONFIG serves.

README's main command (``bash ci/demo.sh``) starts the local control plane when no
KUBECONFIG is given and runs this.
"""

from __future__ import annotations

import sys

from kubernetes import client

from operator_kit.client import ConfigurationError, api_client


def main() -> int:
    try:
        api = api_client()
    except ConfigurationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    version = client.VersionApi(api).get_code()
    print(f"Kubernetes {version.git_version} at {api.configuration.host}")
    for ns in client.CoreV1Api(api).list_namespace().items:
        print(f"  namespace {ns.metadata.name}: {ns.status.phase}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
