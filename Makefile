# kafkalab: two commands for a fresh machine (Linux or macOS: Python 3.11-3.13, a JDK 17+, Maven).
#   make lab    set everything up, start the cluster, open JupyterLab on notebooks/
#   make test   set everything up, run every test and every notebook against the live cluster
#   make check  the fast tier: every test that needs no cluster, no JVM and no Spark (seconds);
#               it needs Python alone (no Java, no Maven, no jars)
#   make lab EDITION=ko   JupyterLab on the Korean edition (notebooks/ko/, 한국어판)
#   make ko     after an English text change: merge it into the Korean catalogs and regenerate
#               notebooks/ko/ (see src/kafkalab/i18n.py for the steps)
# Everything is cached: a second run installs nothing and fetches nothing.
#
# The compose backend (the same cluster in Docker containers, docker-compose.yml), apart from
# make test and run by .ci/run after it:
#   make compose-setup  a Docker engine and Compose 2.20 or newer (v5 included): nothing where they
#                       answer (Docker Desktop, docker-ce); as root with apt: Debian's docker.io,
#                       dockerd started, Compose v5 built from the Go module proxy, never over a
#                       plugin you have (kafka/docker/engine.sh; exit 3: none can be had)
#   make compose-image  the stand-in for apache/kafka (kafka/docker/Dockerfile), for machines
#                       without Docker Hub; rebuilt only when its inputs change
#   make compose-smoke  engine, image, `kafkalab up --backend compose`, every node verb, notebooks
#                       06 and 08, down with nothing left, dockerd stopped if it started it
#                       (tests/test_compose_live.py); skipped, saying why, without an engine,
#                       except with CI=true, where that fails it
#   make compose-stop   stop the dockerd compose-setup started (never one it did not start)

SHELL := /bin/bash
# The newest of python3.13, python3.12, python3.11 on PATH that runs (a pyenv shim of a version not
# selected does not); PYTHON=/path/to/python overrides. check-python prints which one it is.
PYTHONS := python3.13 python3.12 python3.11
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in $(PYTHONS); do $$p -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))' >/dev/null 2>&1 && { echo $$p; break; }; done)
endif
# The same words as kafkalab.errors.JAVA_INSTALL (tests/test_make.py checks they agree).
JAVA_INSTALL := Debian 13 or Ubuntu 24.04: sudo apt install openjdk-21-jdk-headless maven; macOS: brew install openjdk@21 maven, then export JAVA_HOME=\$$(brew --prefix openjdk@21)
PYTHON_INSTALL := Debian 13 or Ubuntu 24.04: sudo apt install python3 python3-venv; macOS: brew install python@3.13
# KAFKALAB_VENV: a venv made elsewhere (the lab image's /opt/kafkalab/venv, .devcontainer/Dockerfile)
VENV := $(or $(KAFKALAB_VENV),.venv)
BIN := $(VENV)/bin
STATE := .kafkalab
MVN := mvn -q -B -s kafka/maven-settings.xml

.PHONY: lab edition test check book ko setup venv jars up down status benchmark clean check-python check-tools lock \
	compose-setup compose-image compose-smoke compose-stop lab-image lab-smoke \
	workshop workshop-down workshop-clean workshop-smoke workshop-lock

# JupyterLab refuses to run as root (containers, CI images) unless told --allow-root. `kafkalab
# extras` prints one line when something optional is missing (Chromium, a CJK font, strace; Linux).
# EDITION=ko opens the Korean edition (notebooks/ko/): the same code, the text in Korean.
EDITION ?= en
lab: edition setup up
	@$(BIN)/kafkalab extras
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks $(if $(filter ko,$(EDITION)),--LabApp.default_url=/lab/tree/ko) $(if $(filter 0,$(shell id -u)),--allow-root)

# Checked before anything is set up or started.
edition:
	@case "$(EDITION)" in en|ko) ;; *) echo "error: EDITION=$(EDITION): the editions are en (default) and ko"; exit 2;; esac

# The Korean edition: merge the English text into the catalogs (notebooks/locale/ko/), then
# write notebooks/ko/ from the English notebooks and the catalogs. `make check` fails while a
# string is untranslated or fuzzy: `$(BIN)/kafkalab i18n status` lists them.
ko: venv
	$(BIN)/kafkalab i18n update
	$(BIN)/kafkalab i18n build

# Starts the cluster if none is running and stops it afterwards if it started it (also when
# `kafkalab up` fails part-way: no broker of a failed start outlives the command).
# --capture=sys: Python output is captured per test, but what C code writes to the process's
# stderr (librdkafka's logs and assertion messages) is not, so an abort is never silent:
# the assertion line is printed beside faulthandler's traceback.
#
# LANES pytest-xdist workers run side by side (tests/lanes.py): the first against this cluster,
# each other one against a cluster of its own that it starts on the next port base
# (KAFKALAB_PORT_BASE + 1000 per lane) and stops at its end. A notebook or a test file runs whole
# on one lane (--dist loadfile), longest files first. LANES=1 runs everything in one process, in
# order. PYTEST_ARGS goes to pytest as it is. The run's JUnit report goes to JUNIT: the next
# run's lanes are scheduled from its seconds per file (tests/lanes.py), and
# `benchmarks/test_times.py build/junit.xml` reads where the time went. The default is three
# lanes where the machine has 12 GiB of memory or more (a lane holds about 3 GB: its cluster, its
# Spark, its kernels), two from 7 GiB, else one: measured on 2 cores and 24 GiB, three lanes
# 11:45 and two 13:49 (benchmarks/README.md).
LANES ?= $(shell $(PYTHON) -c "import os; g = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30; print(3 if g >= 12 else 2 if g >= 7 else 1)" 2>/dev/null || echo 2)
PYTEST_ARGS ?=
JUNIT ?= build/junit.xml
# Of the Korean edition, one lesson runs under nbval (its code is the English one's, which runs
# too; tests/test_i18n.py checks they are the same): the others are deselected.
KO_TESTED := notebooks/ko/00_cluster_tour.ipynb
KO_SKIPPED := $(filter-out $(KO_TESTED),$(wildcard notebooks/ko/*.ipynb notebooks/ko/solutions/*.ipynb))
test: setup
	@$(BIN)/kafkalab extras
	@# kafkalab's bytecode, once: where PYTHONDONTWRITEBYTECODE is set (as on this CI) Python reads
	@# .pyc files but never writes them, so every worker, kernel and CLI process compiled the package again
	@$(BIN)/python -m compileall -q src/kafkalab
	@started=0; \
	if ! $(BIN)/kafkalab status --check >/dev/null 2>&1; then \
	  $(BIN)/kafkalab up || { $(BIN)/kafkalab down; exit 1; }; started=1; \
	fi; \
	trap 'if [ $$started = 1 ]; then $(BIN)/kafkalab down; fi' EXIT; \
	mkdir -p $(dir $(JUNIT)); \
	$(BIN)/pytest tests notebooks --nbval-lax --nbval-cell-timeout=300 -p no:cacheprovider --capture=sys \
	  $(addprefix --deselect ,$(KO_SKIPPED)) \
	  -p lanes $(if $(filter-out 1,$(LANES)),-n $(LANES) --dist loadfile --no-loadscope-reorder) --junitxml=$(JUNIT) $(PYTEST_ARGS)

# The fast tier: no cluster, no JVM, no Spark, and Python alone to set up (the venv: no Java,
# Maven or jars). tests/conftest.py fails a test that starts a process or opens a socket without
# its marker (cluster, spark, jvm: not run here; subprocess, socket: Python's and the system's
# tools, loopback only). Run it after every change; make test before a commit lands.
check: venv
	$(BIN)/pytest tests -m "not cluster and not spark and not jvm" -p no:cacheprovider -q

# The rendered book: every notebook (and every solution) executed against the live cluster by
# Sphinx + MyST-NB (config in notebooks/_book), a static HTML site in build/book/ (open
# build/book/index.html). Executed copies go under build/, never back into notebooks/.
# Starts the cluster if none is running and stops it afterwards if it started it.
book: setup
	@started=0; \
	if ! $(BIN)/kafkalab status --check >/dev/null 2>&1; then \
	  $(BIN)/kafkalab up || exit 1; started=1; \
	fi; \
	trap 'if [ $$started = 1 ]; then $(BIN)/kafkalab down; fi' EXIT; \
	rm -rf build/book build/book-doctrees; \
	$(BIN)/sphinx-build -b html -E -d build/book-doctrees -c notebooks/_book notebooks build/book && \
	KAFKALAB_BOOK_LANG=ko $(BIN)/sphinx-build -b html -E -d build/book-doctrees/ko -c notebooks/_book notebooks/ko build/book/ko && \
	echo "the book: build/book/index.html (한국어판: build/book/ko/index.html)"

# The tools are checked first: a missing JDK is said before the venv is built.
setup: check-tools venv jars

# Python 3.11-3.13: all that make venv, make check and make lock need.
check-python:
	@[ -n "$(PYTHON)" ] || { echo "error: none of python3.13, python3.12, python3.11 found on PATH: kafkalab needs Python 3.11, 3.12 or 3.13 ($(PYTHON_INSTALL); or: make PYTHON=/path/to/python3)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))' 2>/dev/null || { echo "error: PYTHON=$(PYTHON) is not Python 3.11, 3.12 or 3.13 ($$($(PYTHON) -V 2>&1 | head -1)): kafkalab needs one of them ($(PYTHON_INSTALL))"; exit 1; }
	@echo "using $(PYTHON) ($$($(PYTHON) -V 2>&1))"

# And a JDK 17+ (JAVA_HOME/bin/java first, as kafkalab and Spark take it) and Maven: make setup and
# jars, so make lab, test, book and the others that set up.
check-tools: check-python
	@java=java; if [ -n "$$JAVA_HOME" ] && [ -x "$$JAVA_HOME/bin/java" ]; then java=$$JAVA_HOME/bin/java; fi; \
	command -v $$java >/dev/null || { echo "error: java not found: Kafka 4 and Spark 4 need a JDK 17 or newer ($(JAVA_INSTALL))"; exit 1; }; \
	v=$$($$java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'); \
	[ "$${v%%.*}" -ge 17 ] 2>/dev/null || { echo "error: $$(command -v $$java) is Java $${v:-of unknown version}: Kafka 4 and Spark 4 need a JDK 17 or newer ($(JAVA_INSTALL))"; exit 1; }; \
	echo "using Java $$v ($$(command -v $$java))"
	@command -v mvn >/dev/null || { echo "error: mvn not found: Maven fetches the Kafka jars ($(JAVA_INSTALL))"; exit 1; }

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml requirements.lock | check-python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c requirements.lock -e '.[test,book]'
	touch $@

# requirements.lock: every transitive dependency at one version for Python 3.11, 3.12 and 3.13 on
# Linux and macOS (uv's universal resolution, uv itself from PyPI, pinned; the pins already in the
# file are kept where they still fit). Run after changing pyproject.toml; tests/test_lock.py checks
# the result (one version per package, pyproject's pins, no Python-version fork).
UV_VERSION := 0.13.9
lock: check-python
	test -x build/uv/bin/pip || $(PYTHON) -m venv build/uv
	build/uv/bin/pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	build/uv/bin/uv pip compile -q pyproject.toml --extra test --extra book --universal --python-version 3.11 \
	  --no-annotate --custom-compile-command "make lock" -o requirements.lock

# kafka/pom.xml fetches the broker jars and compiles kafkalab's Java programs (kafka/src) into
# CLIENTS_JAR, in one Maven run with one stamp: it runs again when the POM or a Java source
# changes, or when the jar is missing.
CLIENTS_JAR := $(STATE)/jars/clients/kafkalab-clients.jar
JAVA_SOURCES := $(shell find kafka/src -name '*.java')
# KAFKALAB_JARS naming jars fetched elsewhere (the lab image's, .devcontainer/Dockerfile, with the
# same POMs): those are used, and Maven does not run.
ifneq ($(and $(KAFKALAB_JARS),$(wildcard $(KAFKALAB_JARS)/broker/.fetched),$(wildcard $(KAFKALAB_JARS)/spark/.fetched)),)
jars: | check-tools
	@echo "using the jars in $(KAFKALAB_JARS) (KAFKALAB_JARS)"
else
jars: $(STATE)/jars/broker/.fetched $(STATE)/jars/spark/.fetched
endif
$(STATE)/jars/broker/.fetched: kafka/pom.xml kafka/maven-settings.xml $(JAVA_SOURCES) $(if $(wildcard $(CLIENTS_JAR)),,FORCE) | check-tools
	rm -rf $(STATE)/jars/broker $(STATE)/jars/clients $(STATE)/build/kafka
	$(MVN) -f kafka/pom.xml package
	touch $@
FORCE:
$(STATE)/jars/spark/.fetched: kafka/spark-connector.pom.xml kafka/maven-settings.xml | check-tools
	rm -rf $(STATE)/jars/spark
	$(MVN) -f kafka/spark-connector.pom.xml package
	touch $@

up: setup
	$(BIN)/kafkalab up

ENGINE := kafka/docker/engine.sh
compose-setup:
	$(ENGINE) up

compose-image: jars compose-setup
	$(ENGINE) image

# -s: each step's seconds are printed as it ends.
compose-smoke: setup
	KAFKALAB_COMPOSE_SMOKE=1 $(BIN)/pytest tests/test_compose_live.py -p no:cacheprovider -s -rs -v

compose-stop:
	$(ENGINE) down

# The whole lab in a container (docker-compose.yml's lab service, .devcontainer/Dockerfile):
#   make lab-image   the lab image, on python:3.13-slim or a stand-in of it made here; rebuilt
#                    only when a file of the checkout changes
#   make lab-smoke   engine, lab image, `docker compose --profile lab up -d lab` (own project and
#                    port), notebooks 00, 03 and 08 under nbval inside the container, Chromium
#                    on the JupyterLab it serves, down with nothing left (tests/test_lab_live.py);
#                    skipped, saying why, without an engine, except with CI=true
lab-image: compose-setup
	$(ENGINE) lab-image

lab-smoke: venv
	KAFKALAB_LAB_SMOKE=1 $(BIN)/pytest tests/test_lab_live.py -p no:cacheprovider -s -rs -v

# The workshop hub (workshop/: JupyterHub, DockerSpawner, one lab container and cluster per learner;
# notebooks/workshop_guide.md, "The workshop hub"):
#   make workshop        the lab image, the hub's two images, the hub on http://127.0.0.1:8000
#                        (WORKSHOP_IP, WORKSHOP_PORT; another interface needs TLS), its URL and
#                        where the passwords are (workshop/.secrets/, made once, never in git)
#   make workshop-down   the hub and every learner's lab stopped: no container or network left
#   make workshop-clean  workshop-down, and the learners' notebook volumes removed
#   make workshop-smoke  two learners log in through the hub, run notebook 03 side by side, each
#                        on their own cluster; stop leaves nothing (tests/test_workshop_live.py);
#                        skipped, saying why, without an engine, except with CI=true
#   make workshop-lock   workshop/hub.lock and singleuser.lock again (uv, as make lock)
workshop: compose-setup
	workshop/workshop.sh up

workshop-down:
	workshop/workshop.sh down

workshop-clean:
	workshop/workshop.sh clean

workshop-smoke: venv
	KAFKALAB_WORKSHOP_SMOKE=1 $(BIN)/pytest tests/test_workshop_live.py -p no:cacheprovider -s -rs -v

workshop-lock: check-python
	test -x build/uv/bin/pip || $(PYTHON) -m venv build/uv
	build/uv/bin/pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	build/uv/bin/uv pip compile -q workshop/hub.in --python-version 3.13 --python-platform linux \
	  --no-annotate --custom-compile-command "make workshop-lock" -o workshop/hub.lock
	build/uv/bin/uv pip compile -q workshop/singleuser.in -c requirements.lock --python-version 3.13 --python-platform linux \
	  --no-annotate --custom-compile-command "make workshop-lock" -o workshop/singleuser.lock

down:
	$(BIN)/kafkalab down

status:
	$(BIN)/kafkalab status

benchmark: setup
	$(BIN)/python benchmarks/cluster_up.py

clean:
	-$(BIN)/kafkalab down 2>/dev/null
	rm -rf $(VENV) $(STATE)
