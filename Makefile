# The two commands (see README): `make demo` and `make test`. Both install what is
# missing first (scripts/bootstrap.sh is idempotent) and bring the local stack up.
.PHONY: demo test check unit lint stack-up stack-down bootstrap containers standins

bootstrap:
	@scripts/bootstrap.sh

stack-up: bootstrap
	@.venv/bin/hookstream stack up

stack-down:
	@.venv/bin/hookstream stack down

demo: stack-up
	@.venv/bin/hookstream demo

# ruff, the import-circle check, the Go farm's gofmt/vet, mypy
lint: bootstrap
	@scripts/lint.sh

unit: bootstrap
	@.venv/bin/pytest tests/unit -q

# the whole suite (CI): lint, then every tier; the outage tests on a stack of their own
test: stack-up
	@scripts/test.sh

# the development loop: lint, unit and the integration tests that need no outage
check: stack-up
	@scripts/check.sh

# the three services as containers (podman here, the same compose file as Docker): builds
# the stand-in base images once, the image, runs the demo and the egress checks through
# docker-compose.yml, stops each service and checks it drained (scripts/containers.sh)
containers: bootstrap
	@scripts/containers.sh

standins:
	@scripts/container_standins.sh
