"""The workshop hub's configuration (JupyterHub 6.1.1, DockerSpawner 14.0.0, jupyterhub-idle-culler
2.0.0): one lab container per learner, each with a Kafka cluster of its own inside.

Read by ``jupyterhub -f`` in the hub container (workshop/hub.Dockerfile, workshop/compose.yml);
``workshop/workshop.sh`` (``make workshop``) sets the environment below and writes the secrets.
Nothing secret is written here: the passwords and the admin API token are files in
``$WORKSHOP_SECRETS`` (``workshop/.secrets/`` on the host, git-ignored, made at the first start).

Environment (defaults in brackets):

- ``WORKSHOP_PROJECT`` [kafkalab-workshop]: prefix of every container, volume and network the hub
  makes, and their label ``org.kafkalab.workshop``; the Docker network the learners join has this
  name (workshop/compose.yml makes it).
- ``WORKSHOP_IP`` [127.0.0.1]: the host interface the hub is published on. Any other address
  (a room's network) needs TLS: ``tls.crt`` and ``tls.key`` in the secrets folder (copied there
  from ``WORKSHOP_TLS_CERT``/``WORKSHOP_TLS_KEY`` by workshop.sh), or ``WORKSHOP_TLS=self-signed``
  to make a certificate at start; else the hub refuses to start (``sys.exit`` with the reason).
- ``WORKSHOP_SINGLEUSER_IMAGE``: the learners' image (workshop/singleuser.Dockerfile).
- ``WORKSHOP_MEM_LIMIT`` [4G], ``WORKSHOP_CPU_LIMIT`` [2]: each learner's container limits (Docker's
  memory limit; CPU as cores, ``cpu_quota``/``cpu_period``), sized from the capacity measured in
  notebooks/workshop_guide.md.
- ``WORKSHOP_MAX_LEARNERS`` [0: no limit]: labs running at once (``JupyterHub.active_server_limit``).
- ``WORKSHOP_IDLE_TIMEOUT`` [3600]: seconds without activity before jupyterhub-idle-culler stops a
  learner's lab (the notebooks stay in the learner's volume).
- ``WORKSHOP_ADMIN_USER`` [instructor]: the one admin, who logs in with the admin password.

Sources: JupyterHub's docs (Authenticators: SharedPasswordAuthenticator, added in 5.3; Services:
the idle culler with its role's scopes; "Running JupyterHub with SSL"), DockerSpawner's
(``network_name``, ``volumes`` with ``{username}``, ``remove``, ``mem_limit``, ``cpu_limit``).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub defines it for its config files)

PROJECT = os.environ.get("WORKSHOP_PROJECT", "kafkalab-workshop")
SECRETS = Path(os.environ.get("WORKSHOP_SECRETS", "/srv/jupyterhub/secrets"))
PUBLISHED_IP = os.environ.get("WORKSHOP_IP", "127.0.0.1")
ADMIN_USER = os.environ.get("WORKSHOP_ADMIN_USER", "instructor")
#: Where the learner's notebooks are in the lab image; their named volume is mounted here, and a new
#: volume starts as a copy of the image's notebooks (Docker fills an empty named volume from it).
NOTEBOOKS = "/opt/kafkalab/notebooks"
#: The label on every learner container (workshop.sh down removes what is left by it).
LABEL = "org.kafkalab.workshop"
#: The hub's own port inside its container (workshop/compose.yml publishes it on WORKSHOP_IP).
PORT = 8000
#: The ports the learners' containers' hub talks to: the hub's API, on the workshop network.
HUB_API_PORT = 8081


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: the hub is reachable from this host only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def secret(name: str) -> str:
    """The secret file ``name`` in the secrets folder, stripped; exits naming it when it is missing."""
    path = SECRETS / name
    if not path.is_file():
        sys.exit(f"workshop hub: {path} is missing: start the hub with `make workshop` "
                 "(workshop/workshop.sh writes the secrets)")
    return path.read_text().strip()


def self_signed(cert: Path, key: Path, address: str) -> None:
    """A self-signed certificate for ``address`` (an IP or a host name), valid 30 days, RSA 2048,
    written to ``cert``/``key`` (PEM; the key 0600). Uses ``cryptography``, which JupyterHub's
    certipy brings."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        alt = x509.DNSName(address)
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(private.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
                   .sign(private, hashes.SHA256()))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    key.chmod(0o600)
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


# --- Listening: 127.0.0.1 unless told otherwise, and then only over TLS ------------------------
if is_loopback(PUBLISHED_IP):
    c.JupyterHub.bind_url = f"http://:{PORT}"
else:
    cert, key = SECRETS / "tls.crt", SECRETS / "tls.key"
    if not (cert.is_file() and key.is_file()) and os.environ.get("WORKSHOP_TLS") == "self-signed":
        self_signed(cert, key, os.environ.get("WORKSHOP_TLS_NAME") or PUBLISHED_IP)
    if not (cert.is_file() and key.is_file()):
        sys.exit(f"workshop hub: WORKSHOP_IP={PUBLISHED_IP} serves the hub beyond this host, which "
                 "needs TLS: give WORKSHOP_TLS_CERT and WORKSHOP_TLS_KEY (PEM files), or "
                 "WORKSHOP_TLS=self-signed to make a certificate; the passwords would cross the "
                 "room's network in clear text otherwise")
    c.JupyterHub.bind_url = f"https://:{PORT}"
    c.JupyterHub.ssl_cert = str(cert)
    c.JupyterHub.ssl_key = str(key)

# The hub's API, for the learners' servers on the workshop network (hostname `hub`, compose.yml).
c.JupyterHub.hub_bind_url = f"http://0.0.0.0:{HUB_API_PORT}"
c.JupyterHub.hub_connect_url = f"http://hub:{HUB_API_PORT}"
# Stopping the hub stops every learner's lab (and DockerSpawner removes the containers).
c.JupyterHub.cleanup_servers = True
c.JupyterHub.active_server_limit = int(os.environ.get("WORKSHOP_MAX_LEARNERS") or 0)

# --- Login: one shared workshop password; the instructor with an admin password ----------------
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = secret("learner-password")
c.SharedPasswordAuthenticator.admin_password = secret("admin-password")
c.Authenticator.admin_users = {ADMIN_USER}
c.Authenticator.allow_all = True  # any name with the workshop password gets a lab

# --- Services: the idle culler; the admin token workshop.sh makes at each start ----------------
IDLE_TIMEOUT_S = int(os.environ.get("WORKSHOP_IDLE_TIMEOUT") or 3600)
c.JupyterHub.services = [
    {"name": "idle-culler",
     "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE_TIMEOUT_S}",
                 f"--cull-every={max(60, IDLE_TIMEOUT_S // 10)}"]},
    # the REST API as the instructor's tools (and the live test) use it: never a learner
    {"name": "workshop-admin", "api_token": secret("api-token")},
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    {"name": "admin", "services": ["workshop-admin"], "users": [ADMIN_USER]},
]

# --- The learners' labs: one container each, from the learners' image --------------------------
c.JupyterHub.spawner_class = "dockerspawner.DockerSpawner"
c.DockerSpawner.image = os.environ.get("WORKSHOP_SINGLEUSER_IMAGE", "kafkalab/workshop-lab:latest")
c.DockerSpawner.pull_policy = "never"  # workshop.sh builds it on this host
c.DockerSpawner.prefix = PROJECT  # containers <project>-<user>
c.DockerSpawner.network_name = PROJECT
c.DockerSpawner.use_internal_ip = True  # the hub reaches the lab on the workshop network only
c.DockerSpawner.remove = True  # a stopped lab's container goes; its notebook volume stays
# The learner's notebooks: a named volume of their own, kept across a restart of their lab and a
# restart of the hub; `make workshop-clean` removes them.
c.DockerSpawner.volumes = {f"{PROJECT}-notebooks-{{username}}": NOTEBOOKS}
c.DockerSpawner.notebook_dir = NOTEBOOKS
c.Spawner.default_url = "/lab"
c.DockerSpawner.mem_limit = os.environ.get("WORKSHOP_MEM_LIMIT") or "4G"
c.DockerSpawner.cpu_limit = float(os.environ.get("WORKSHOP_CPU_LIMIT") or 2)
c.DockerSpawner.extra_create_kwargs = {"labels": {LABEL: PROJECT, f"{LABEL}.user": "{username}"}}
# init: the JVMs' and kernels' orphans are reaped; no-new-privileges: nothing in the lab becomes root;
# pids_limit: a runaway program stays in its own container. No Docker socket, no privileged mode,
# no host network: the learner reaches the hub's API and the internet, not the engine, and the
# other learners' clusters listen on their own containers' 127.0.0.1.
c.DockerSpawner.extra_host_config = {"init": True, "security_opt": ["no-new-privileges:true"], "pids_limit": 4096}
# `kafkalab up` runs before the server answers: up to a few minutes on a loaded host.
c.Spawner.start_timeout = 600
c.Spawner.http_timeout = 600
