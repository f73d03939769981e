# The workshop hub (workshop/compose.yml, service hub): JupyterHub 6.1.1 with DockerSpawner 14.0.0,
# jupyterhub-idle-culler 2.0.0 (workshop/hub.lock) and its proxy, configurable-http-proxy 5.2.0
# from the npm registry (workshop/proxy/package-lock.json), on Debian's Node.js.
#
# Base: the official python:3.13-slim, as the lab image's (.devcontainer/Dockerfile); where no
# registry serves it, kafka/docker/engine.sh lab-image makes a stand-in of that name first.
# Node.js: Debian 13's nodejs (20.19); configurable-http-proxy 5.2.0 asks for node >= 20 and so do
# all its locked dependencies (5.3.0 brings commander 15, which asks for node >= 22.12). npm only
# installs the lock and is removed in the same layer. No binary of one architecture is fetched by
# hand: amd64 and arm64 alike.
#
# The hub runs as root in its container: it talks to the Docker engine through the socket
# workshop/compose.yml mounts (whoever holds that socket holds the host). Learners' containers
# never get it (workshop/jupyterhub_config.py).
FROM python:3.13-slim

USER root
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /opt/proxy
COPY proxy/package.json proxy/package-lock.json ./
# NODE_EXTRA_CA_CERTS: npm trusts the system's certificates too (the same Mozilla set on the
# official image; on the stand-in, this machine's own as well).
RUN set -eux; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends nodejs npm ca-certificates >/dev/null; \
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt npm ci --omit=dev --no-audit --no-fund --loglevel=error; \
    ln -s /opt/proxy/node_modules/.bin/configurable-http-proxy /usr/local/bin/configurable-http-proxy; \
    apt-get purge -y -qq npm >/dev/null; apt-get autoremove -y -qq >/dev/null; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /root/.npm; \
    configurable-http-proxy --version

# JupyterHub, DockerSpawner and the culler in a venv, every package pinned.
COPY hub.lock /opt/hub/hub.lock
RUN python3 -m venv /opt/hub/venv \
    && /opt/hub/venv/bin/pip install -q --no-cache-dir --disable-pip-version-check -r /opt/hub/hub.lock

COPY jupyterhub_config.py /etc/jupyterhub/jupyterhub_config.py
ENV PATH=/opt/hub/venv/bin:$PATH LANG=C.UTF-8
# The hub's database and cookie secret: inside the container, gone with it (make workshop-down).
WORKDIR /srv/jupyterhub
EXPOSE 8000
CMD ["jupyterhub", "-f", "/etc/jupyterhub/jupyterhub_config.py"]
