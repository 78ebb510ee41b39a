# The two commands (see README): `make demo` and `make test`. Both install what is
# missing first (scripts/bootstrap.sh is idempotent) and bring the local stack up.
.PHONY: demo test unit lint stack-up stack-down bootstrap

bootstrap:
	@scripts/bootstrap.sh

stack-up: bootstrap
	@.venv/bin/hookstream stack up

stack-down:
	@.venv/bin/hookstream stack down

demo: stack-up
	@.venv/bin/hookstream demo

lint: bootstrap
	@.venv/bin/ruff check src services tests benchmarks

unit: bootstrap
	@.venv/bin/pytest tests/unit -q

test: stack-up
	@scripts/test.sh
