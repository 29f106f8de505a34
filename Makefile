# Troupe. `make run` starts a cell, `make test` runs the tests.
GO       ?= go
BIN      := bin/troupe
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE     ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(DATE)
DURATION ?= 10s
WORKLOADS ?= seq,cas,place,place4,split4
# ROUNDS > 1: bench-compare starts both systems and alternates them in rounds.
ROUNDS ?= 1
# REPEAT > 1: bench-compare runs the comparison that many times and reports each ratio's spread.
REPEAT ?= 1
FUZZTIME ?= 30s
FAULT_ROUNDS ?= 20
FAULT_SEED ?= $(shell date +%s)
FAULT_LOAD ?= 30s
FAULT_OUT ?= /tmp/troupe-faults
FAULT_WORKLOADS ?= register,bank

.PHONY: all build run test test-faults lint proto bench bench-compare fuzz clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./tools/troupe

# A whole cell in one process: store, schedulers, controllers and an exec
# agent for this host, with its data in ./troupe-data (see README).
run: build
	$(BIN) up --data-dir troupe-data

test: lint
	$(GO) test -count=1 ./...
	cd tools/benchcompare && $(GO) vet ./... && $(GO) test -short -count=1 ./...
	cd deploy/kubernetes/check && $(GO) vet ./... && $(GO) test -count=1 ./...

# Many rounds of the store under faults (kill -9, restarts, partitions,
# lost and delayed Raft traffic; for the bank, kill -9 of a cross-shard
# commit's driver too), FAULT_ROUNDS of each of FAULT_WORKLOADS, each
# history checked for linearizability; `make test` runs one short round of
# each. A failed round prints its seed (rerun with FAULT_SEED=...
# FAULT_ROUNDS=1 FAULT_WORKLOADS=...) and writes its history and
# visualization to FAULT_OUT. Needs root (network namespaces).
test-faults:
	$(GO) test -run '^TestFaults$$' -count=1 -timeout 0 -v ./tools/faults \
		-rounds $(FAULT_ROUNDS) -seed $(FAULT_SEED) -load $(FAULT_LOAD) -out $(FAULT_OUT) -workloads $(FAULT_WORKLOADS)

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# Regenerate the checked-in protobuf code (needs Debian's protobuf-compiler
# and protoc-gen-go-grpc, and google.golang.org/protobuf's protoc-gen-go
# v1.28.1 first on PATH: see README). The *_vtproto.pb.go files (MarshalVT,
# UnmarshalVT, SizeVT without reflection, for the hot paths) come from
# protoc-gen-go-vtproto at the vtprotobuf version go.mod requires:
#   go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$(go list -m -f '{{.Version}}' github.com/planetscale/vtprotobuf)
proto:
	protoc -I proto \
		--go_out=. --go_opt=module=github.com/troupe-cluster/troupe \
		--go-grpc_out=. --go-grpc_opt=module=github.com/troupe-cluster/troupe \
		--go-vtproto_out=. --go-vtproto_opt=module=github.com/troupe-cluster/troupe \
		--go-vtproto_opt=features=marshal+unmarshal+size \
		proto/troupe/store/v1/*.proto proto/troupe/v1/*.proto
	# vtprotobuf encodes map entries in Go's map order, which is random;
	# an object's stored form is deterministic, so troupe.v1's MarshalVT
	# ranges over sorted keys instead (proto/troupe/v1/mapkeys.go).
	sed -i 's/for k := range m\.\([A-Za-z0-9_]*\) {$$/for _, k := range keysDescending(m.\1) {/' \
		proto/troupe/v1/*_vtproto.pb.go
	# InvalidUTF8 methods, for the client library to check what it writes
	# (vtprotobuf's encoding does not; tools/protoc-gen-go-utf8).
	$(GO) build -o bin/protoc-gen-go-utf8 ./tools/protoc-gen-go-utf8
	protoc -I proto --plugin=protoc-gen-go-utf8=bin/protoc-gen-go-utf8 \
		--go-utf8_out=. --go-utf8_opt=module=github.com/troupe-cluster/troupe \
		proto/troupe/v1/*.proto

# Store microbenchmarks, the simulator against a store (timing-dependent
# measures), and the troupe-only workloads.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./cellstore/...
	$(GO) test -run '^$$' -bench AgainstMemory -benchtime 3x ./tools/sim/storerun
	DURATION=$(DURATION) $(BIN) bench -workloads=$(WORKLOADS)

# The same workloads against Troupe and embedded etcd, one JSON line each.
bench-compare:
	cd tools/benchcompare && DURATION=$(DURATION) $(GO) run . -workloads=$(WORKLOADS) -rounds=$(ROUNDS) -repeat=$(REPEAT)

# Longer fuzzing than the seed corpus `make test` runs.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzCommitRequest -fuzztime $(FUZZTIME) ./cellstore/server

clean:
	rm -rf bin

# The container image $(IMAGE):$(VERSION), also tagged :latest, FROM
# scratch: the static troupe binary (CGO_ENABLED=0, the version ldflags
# above), /etc/passwd and /etc/group (root, troupe 65532, nobody), /tmp,
# and /var/lib/troupe and /etc/troupe/pki as mount points owned by the
# troupe user, which the image runs as (deploy/image/Dockerfile). The
# build context is staged in bin/image; no base image is pulled.
IMAGE ?= troupe
IMAGE_CONTEXT := bin/image

.PHONY: image compose-test
image: DATE := $(DATE)
image:
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/rootfs/etc $(IMAGE_CONTEXT)/rootfs/tmp $(IMAGE_CONTEXT)/empty
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_CONTEXT)/rootfs/troupe ./tools/troupe
	install -m 0644 deploy/image/passwd deploy/image/group $(IMAGE_CONTEXT)/rootfs/etc/
	chmod 1777 $(IMAGE_CONTEXT)/rootfs/tmp
	ln -s usr/bin $(IMAGE_CONTEXT)/rootfs/bin
	ln -s usr/lib $(IMAGE_CONTEXT)/rootfs/lib
	ln -s usr/lib64 $(IMAGE_CONTEXT)/rootfs/lib64
	docker build -f deploy/image/Dockerfile \
		--build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg BUILD_DATE=$(DATE) \
		-t $(IMAGE):$(VERSION) -t $(IMAGE):latest $(IMAGE_CONTEXT)

# The compose cell end to end (not part of `make test`; needs Docker and
# docker-compose): builds the image, starts deploy/compose under a new
# project name, runs the examples, stops and restarts a store node, then
# upgrades every container one by one to $(VERSION)-next while a client
# commits, and tears the cell down (tools/composetest).
compose-test:
	$(GO) run ./tools/composetest -version '$(VERSION)'
