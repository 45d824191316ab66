# pgfeldera: the two commands a new user needs are `make demo` and `make test`.
GO      ?= go
PKGS    ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 45m
# TESTEXTRA adds flags to TESTFLAGS (CI: -json).
TESTEXTRA ?=

.PHONY: demo test build bench vet fmt check-postgres image

demo: build
	./bin/pgfeldera demo

test: check-postgres
	$(GO) test $(TESTFLAGS) $(TESTEXTRA) $(PKGS)

# bin/pgfeldera is the binary users deploy; bin/pgfeldera-demo is what
# `pgfeldera demo` runs (a throwaway Postgres and the Feldera double, test
# harnesses that pgfeldera itself does not link).
build:
	$(GO) build -o bin/ ./cmd/pgfeldera ./cmd/pgfeldera-demo

# Not part of `make test`: several minutes, figures in docs/performance.md.
# BENCHFLAGS e.g. -rounds 5 -only ab; BATCH_MAX_ROWS etc. pass through.
bench: build check-postgres
	$(GO) run ./cmd/pgfeldera-bench -pgfeldera bin/pgfeldera $(BENCHFLAGS)

# `make image`: the container image (Containerfile), tagged
# $(IMAGE):$(VERSION) and $(IMAGE):latest. The binary is built here on the
# host and the image is FROM scratch, so no builder or base image is pulled
# (the build works offline). It uses buildah, else podman, else docker,
# whichever is found first (BUILDAH, PODMAN or DOCKER name the program; one
# set empty is skipped). buildah runs with chroot isolation and the vfs
# storage driver, which need no daemon, no runc and no overlay mounts, so it
# builds inside a CI container too; vfs copies whole layers, harmless for
# this image's one layer. TestImage reads the same STORAGE_DRIVER.
IMAGE    ?= pgfeldera
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BUILDAH  ?= $(shell command -v buildah 2>/dev/null)
PODMAN   ?= $(shell command -v podman 2>/dev/null)
DOCKER   ?= $(shell command -v docker 2>/dev/null)
STORAGE_DRIVER ?= vfs
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
IMAGE_CONTEXT = bin/image
IMAGE_ARGS = -f Containerfile -t $(IMAGE):$(VERSION) -t $(IMAGE):latest \
	--build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) $(IMAGE_CONTEXT)

# The binary is static (CGO_ENABLED=0: no libc in the image) and carries
# Go's zone database (-tags timetzdata, 15.1 MB -> 15.5 MB). pgfeldera itself
# needs no zone (it sets TimeZone=UTC on its sessions and passes timestamps
# through as text), but the log's timestamps follow TZ, and without a zone
# database a TZ=Europe/Berlin on the container would log in UTC, silently.
# uid and gid 65532 are the Containerfile's USER.
image:
	@test -r $(CA_BUNDLE) || { echo "make image: no CA bundle at $(CA_BUNDLE) (Debian: apt-get install -y ca-certificates; or set CA_BUNDLE)" >&2; exit 1; }
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/rootfs/etc/ssl/certs $(IMAGE_CONTEXT)/rootfs/var/lib $(IMAGE_CONTEXT)/volume/pgfeldera
	CGO_ENABLED=0 $(GO) build -trimpath -tags timetzdata -ldflags='-s -w -X main.version=$(VERSION)' -o $(IMAGE_CONTEXT)/pgfeldera ./cmd/pgfeldera
	cp $(CA_BUNDLE) $(IMAGE_CONTEXT)/rootfs/etc/ssl/certs/ca-certificates.crt
	echo 'pgfeldera:x:65532:65532:pgfeldera:/var/lib/pgfeldera:/sbin/nologin' > $(IMAGE_CONTEXT)/rootfs/etc/passwd
	echo 'pgfeldera:x:65532:' > $(IMAGE_CONTEXT)/rootfs/etc/group
	find $(IMAGE_CONTEXT)/rootfs -type d -exec chmod 0755 {} +
	find $(IMAGE_CONTEXT)/rootfs -type f -exec chmod 0644 {} +
	chmod 0755 $(IMAGE_CONTEXT)/pgfeldera $(IMAGE_CONTEXT)/volume
	chmod 0700 $(IMAGE_CONTEXT)/volume/pgfeldera
	@if [ -n "$(BUILDAH)" ]; then set -x; $(BUILDAH) --storage-driver $(STORAGE_DRIVER) bud --isolation chroot $(IMAGE_ARGS); \
	elif [ -n "$(PODMAN)" ]; then set -x; $(PODMAN) build $(IMAGE_ARGS); \
	elif [ -n "$(DOCKER)" ]; then set -x; $(DOCKER) build $(IMAGE_ARGS); \
	else echo "make image: no buildah, podman or docker found (Debian: .ci/install-buildah.sh installs buildah)" >&2; exit 1; fi

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
