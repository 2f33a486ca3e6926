# Tack: the two commands are `make up` and `make test`. `make help` lists the rest.
SHELL := bash
NODE_MODULES := node_modules/.package-lock.json

.PHONY: help up down test lint gen gen-check bench build sandbox-image docker deps

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' Makefile | awk -F':.*## ' '{ printf "  make %-14s %s\n", $$1, $$2 }'

$(NODE_MODULES): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

deps: $(NODE_MODULES) ## install npm dependencies

build: deps ## bundle the CLI and every service into dist/ (esbuild; only what changed; TACK_DEV=1 runs the sources) and the web UI into packages/web/dist (vite)
	@node scripts/build.mjs
	@node packages/web/build.mjs

docker: ## make sure a Docker engine runs (installs docker.io + runsc from Debian when root)
	@scripts/ensure-docker.sh

sandbox-image: docker ## build the sandbox image locally (debootstrap + docker import)
	@scripts/build-sandbox-image.sh

.PHONY: images
images: build docker ## build the services, NATS, PostgreSQL and sandbox images locally (no registry), tagged <version>-<git hash>
	@node scripts/build-images.mjs

up: build sandbox-image ## run Tack locally (NATS, every service, gateway URL); a demo session runs when no API key is set
	@node packages/cli/bin/tack.js up --demo

down: ## stop a Tack started by `make up` in the background
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
