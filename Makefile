# hpml: `make train` and `make test` work on a fresh clone; the first call builds .venv.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
HOST ?= 127.0.0.1
PORT ?= 5000
WORKERS ?= 4
DB ?= sqlite:///$(CURDIR)/mlflow-server.db
ARTIFACTS ?= $(CURDIR)/mlartifacts-server
# MLflow's job runners (GenAI scorers, trace roll-ups; hpml uses none): each is a process of its
# own that imports MLflow, so `make ui` and `make server` start them only with JOBS=true
JOBS ?= false
# AUTH=true: MLflow's basic-auth app (users, passwords, READ/EDIT/MANAGE per experiment). Its
# users live in AUTH_DB (by default the server's own database, beside the runs); the admin is
# created on the first start with the password in the environment's MLFLOW_AUTH_ADMIN_PASSWORD.
# AUTH_CACHE_S: seconds a checked password is trusted again without hashing it anew (a slow hash,
# on every request otherwise); a changed password takes up to this long to count everywhere.
AUTH ?= false
AUTH_DB ?= $(DB)
AUTH_ADMIN ?= admin
AUTH_DEFAULT ?= READ
AUTH_CACHE_S ?= 60

.PHONY: install train sweep report study-vae-pruning study-cnn-optimise study-lstm-optimise \
	study-batch-scaling study-roofline ui server test lint format bench gpu-kit gpu-kit-check \
	gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --quiet --upgrade pip
	$(BIN)/pip install --quiet --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)  ## the embedded default: VGG11-CIFAR on synthetic data, offline, into ./mlflow.db
	$(BIN)/python -m hpml.train $(ARGS)

sweep: $(STAMP)  ## a small demo multirun: one parent run, one child per batch size
	$(BIN)/python -m hpml.train -m model=lstm trainer.max_epochs=1 data.batch_size=32,64 $(ARGS)

report: $(STAMP)  ## the report of the latest sweep (ARGS="--sweep <parent id>", --runs, --filter)
	$(BIN)/python -m hpml.report $(ARGS)

# The studies of ../shared/STUDIES.md: each runs its sweep (synthetic data by default, minutes on a
# CPU; real data by ARGS, e.g. ARGS="data=imdb"), then writes its report, even when a job failed.
study-vae-pruning: EXPERIMENT = vae_pruning
study-cnn-optimise: EXPERIMENT = vgg_quant
study-lstm-optimise: EXPERIMENT = lstm_pruning
study-batch-scaling: EXPERIMENT = batch_scaling
study-roofline: EXPERIMENT = roofline_vgg
study-vae-pruning study-cnn-optimise study-lstm-optimise study-batch-scaling study-roofline: $(STAMP)
	$(BIN)/python -m hpml.train -m experiment=$(EXPERIMENT) $(ARGS); status=$$?; \
		$(BIN)/python -m hpml.report --last && exit $$status

ui: $(STAMP)  ## MLflow UI on the local store (foreground; Ctrl-C stops it)
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=$(JOBS) $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db \
		--default-artifact-root $(CURDIR)/mlartifacts --host $(HOST) --port $(PORT)

SERVE = MLFLOW_SERVER_ENABLE_JOB_EXECUTION=$(JOBS) $(BIN)/mlflow server --backend-store-uri '$(DB)' \
	--artifacts-destination '$(ARTIFACTS)' --serve-artifacts --host $(HOST) --port $(PORT) --workers $(WORKERS)
ifeq ($(AUTH),true)
# The app's settings go to a private file (it may hold AUTH_DB's password), removed when the server
# stops; the secret key that signs the UI's forms is made afresh unless the environment has one.
server: $(STAMP)  ## with AUTH=true: users and permissions, the admin's password from MLFLOW_AUTH_ADMIN_PASSWORD
	@if [ '$(origin MLFLOW_AUTH_ADMIN_PASSWORD)' = 'command line' ]; then \
		echo "make server: MLFLOW_AUTH_ADMIN_PASSWORD belongs in the environment (export it), not on make's command line, which shell history and ps show" >&2; exit 2; fi
	@if [ -z "$$MLFLOW_AUTH_ADMIN_PASSWORD" ]; then \
		echo "make server: AUTH=true needs the admin's password in the environment: export MLFLOW_AUTH_ADMIN_PASSWORD (12 characters or more; it makes user '$(AUTH_ADMIN)' on the first start)" >&2; exit 2; fi
	@config=$$(mktemp) && trap 'rm -f "$$config"' EXIT && trap 'exit 143' TERM && trap 'exit 130' INT && \
		printf '[mlflow]\ndefault_permission = %s\ndatabase_uri = %s\nadmin_username = %s\nauthorization_function = mlflow.server.auth:authenticate_request_basic_auth\nauth_cache_ttl_seconds = %s\n' \
			'$(AUTH_DEFAULT)' '$(AUTH_DB)' '$(AUTH_ADMIN)' '$(AUTH_CACHE_S)' > "$$config" && \
		export MLFLOW_AUTH_CONFIG_PATH="$$config" && \
		export MLFLOW_FLASK_SERVER_SECRET_KEY="$${MLFLOW_FLASK_SERVER_SECRET_KEY:-$$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}" && \
		echo '$(subst ','\'',$(SERVE)) --app-name basic-auth' && $(SERVE) --app-name basic-auth
else
server: $(STAMP)  ## a tracking server for a team (foreground): DB=postgresql://... HOST=0.0.0.0 PORT=5000 WORKERS=4 AUTH=true
	$(SERVE)
endif

# Byte-compiled first: where PYTHONDONTWRITEBYTECODE is set, each run the tests start would
# compile hpml's sources again.
test: $(STAMP)
	$(BIN)/python -m compileall -q hpml tests
	$(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=20

lint: $(STAMP)  ## ruff, then the layers of pyproject.toml's [tool.importlinter]: imports point down
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .

bench: $(STAMP)  ## benchmark ratios, measured side by side in one run
	$(BIN)/python -m hpml.bench $(ARGS)

# A GPU machine with torch and Lightning but no index: the wheels it lacks (Hydra, MLflow's
# store, torch-pruning), for its Python 3.12, into .gpu-kit/ (travels with the working tree); there:
# python3 -m hpml.gpu.kit install --folder .gpu-kit --target DIR, then PYTHONPATH=DIR.
gpu-kit: $(STAMP)
	$(BIN)/python -m hpml.gpu.kit build --folder .gpu-kit

# Proves the kit complete before it travels: the machine's packages (torch 2.11) plus the kit in a
# fresh venv (.gpu-kit-check/, made once, a few GB) run a short hpml.train into a new store.
gpu-kit-check: $(STAMP)
	$(BIN)/python -m hpml.gpu.kit check

# The CUDA check (docs/gpu.md): on a GPU machine with the kit beside it, no .venv needed.
gpu-check:  ## OUT=<dir>: run hpml's CUDA paths, summary + store + reports into OUT
	python3 -m hpml.gpu.check --out '$(OUT)'

clean:
	rm -rf outputs multirun/*/ mlflow.db optuna.db mlartifacts .pytest_cache .ruff_cache .bench \
		.import_linter_cache .grimp_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
