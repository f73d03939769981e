# A learner's lab under the workshop hub: the lab image (.devcontainer/Dockerfile: Python, a JDK,
# kafkalab, the jars, the notebooks) plus jupyterhub-singleuser at the hub's version
# (workshop/singleuser.lock: jupyterhub 6.1.1 and what it needs, locked with the lab's own
# requirements.lock as constraints, so no package of the lab changes) and its start script.
# DockerSpawner starts one per learner (workshop/jupyterhub_config.py).
#
# LAB_IMAGE: the lab image's tag (kafka/docker/engine.sh lab-image prints it; workshop/workshop.sh
# passes it).
ARG LAB_IMAGE=kafkalab/lab:latest
FROM ${LAB_IMAGE}

USER lab
COPY --chown=lab:lab singleuser.lock /opt/workshop/singleuser.lock
RUN /opt/kafkalab/venv/bin/pip install -q --no-cache-dir --disable-pip-version-check -r /opt/workshop/singleuser.lock \
    && /opt/kafkalab/venv/bin/jupyterhub-singleuser --version
# A copy of the notebooks, for a volume that starts empty (Kubernetes: workshop/k8s/); Docker fills
# a new named volume from the image itself.
RUN cp -a /opt/kafkalab/notebooks /opt/workshop/notebooks
COPY singleuser-start /opt/workshop/singleuser-start

# The learner's container runs as the learner from its first process: no root step (the lab
# image's lab-start needs one for a bind-mounted notebooks/; here notebooks/ is a named volume
# Docker fills from the image, owned by lab).
USER lab
WORKDIR /opt/kafkalab
CMD ["/opt/workshop/singleuser-start"]
