# pgfeldera: the two commands a new user needs are `make demo` and `make test`.
GO      ?= go
PKGS    ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 45m
# TESTEXTRA adds flags to TESTFLAGS (CI: -json).
TESTEXTRA ?=

.PHONY: demo test build bench vet fmt check-postgres

demo: build
	./bin/pgfeldera demo

test: check-postgres
	$(GO) test $(TESTFLAGS) $(TESTEXTRA) $(PKGS)

build:
	$(GO) build -o bin/pgfeldera ./cmd/pgfeldera

# Not part of `make test`: several minutes, figures in docs/performance.md.
# BENCHFLAGS e.g. -rounds 5 -only ab; BATCH_MAX_ROWS etc. pass through.
bench: build check-postgres
	$(GO) run ./cmd/pgfeldera-bench -pgfeldera bin/pgfeldera $(BENCHFLAGS)

vet:
	gofmt -l . | (! grep .) && $(GO) vet ./...

# The integration tests start their own PostgreSQL (initdb into a temp dir):
# they need the server binaries, not a running server.
check-postgres:
	@if [ -n "$$PG_BIN" ]; then test -x "$$PG_BIN/postgres" || { echo "PG_BIN=$$PG_BIN has no postgres binary" >&2; exit 1; }; \
	elif ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
	  echo "PostgreSQL server binaries not found (need initdb and postgres)." >&2; \
	  echo "Install them (Debian/Ubuntu: apt-get install -y postgresql) or set PG_BIN to their directory." >&2; \
	  exit 1; fi
