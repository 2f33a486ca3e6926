# Tack: the two commands are `make up` and `make test`. `make help` lists the rest.
SHELL := bash
NODE_MODULES := node_modules/.package-lock.json
# The Node that runs Tack (decision 0023): the version in .node-version, brought into .tack/node by
# scripts/ensure-node.sh, first on PATH for every target (node, npm, npx); npm builds native modules against its headers.
NODE_DIR := $(CURDIR)/.tack/node
export PATH := $(NODE_DIR)/bin:$(PATH)
export npm_config_nodedir := $(NODE_DIR)

.PHONY: help up down test lint gen gen-check bench build sandbox-image docker deps node

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' Makefile | awk -F':.*## ' '{ printf "  make %-14s %s\n", $$1, $$2 }'

node: ## install the pinned Node (.node-version) into .tack/node from the npm registry (once; then a no-op)
	@scripts/ensure-node.sh >/dev/null

# node_modules follow the pin: a new one reinstalls them, so native modules match the Node that loads them.
$(NODE_MODULES): package.json package-lock.json .node-version | node
	npm ci --no-audit --no-fund
	@touch $@

deps: $(NODE_MODULES) ## install npm dependencies

build: deps ## bundle the CLI and every service into dist/ (esbuild; only what changed; TACK_DEV=1 runs the sources) and the web UI into packages/web/dist (vite)
	@node scripts/build.mjs
	@node packages/web/build.mjs

docker: ## make sure a Docker engine runs (installs docker.io + runsc from Debian when root)
	@scripts/ensure-docker.sh

sandbox-image: docker node ## build the sandbox image locally (debootstrap + docker import)
	@scripts/build-sandbox-image.sh

.PHONY: images
images: build docker ## build the services, NATS, PostgreSQL and sandbox images locally (no registry), tagged <version>-<git hash>
	@node scripts/build-images.mjs

up: build sandbox-image ## run Tack locally (NATS, every service, gateway URL); a demo session runs when no API key is set
	@node packages/cli/bin/tack.js up --demo

down: node ## stop a Tack started by `make up` in the background
	@node packages/cli/bin/tack.js down

test: build sandbox-image ## run every test (real NATS, real Docker)
	@node scripts/gen.mjs --check
	@npx vitest run

.PHONY: soak
soak: build sandbox-image ## the chaos test (test/e2e/chaos.test.ts) with 200 sessions (TACK_CHAOS_SESSIONS=N for another count)
	@TACK_CHAOS_SESSIONS=$${TACK_CHAOS_SESSIONS:-200} npx vitest run test/e2e/chaos.test.ts

lint: deps ## type-check and lint
	@npx tsc -p tsconfig.json --noEmit
	@npx eslint .

gen: deps ## regenerate TypeScript, the gateway's contract module and docs/events.md from proto/, docs/errors.md from the error catalogue, and deploy/k8s's NATS users from the bus permissions
	@node scripts/gen.mjs
	@node scripts/gen-errors.mjs
	@npx tsx deploy/k8s/render-nats-auth.ts

bench: build sandbox-image ## run the benchmark; writes bench/results/latest.json
	@TACK_CONFIG=bench/operator.yaml npx tsx bench/run.ts
