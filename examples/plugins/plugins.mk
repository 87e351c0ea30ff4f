# Builds the example plugins into examples/plugins/bin/<name>.wasm. Include it from the
# top-level Makefile (`include examples/plugins/plugins.mk`) and run `make plugins`, or run it
# alone from the repository's root: `make -f examples/plugins/plugins.mk plugins`.
GO ?= go

# This file's directory, relative to where make runs (the repository's root).
PLUGINS_DIR     := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
PLUGIN_EXAMPLES := tenant-filter content-router redact retry-backoff audit
PLUGIN_WASMS    := $(PLUGIN_EXAMPLES:%=$(PLUGINS_DIR)/bin/%.wasm)

.PHONY: plugins clean-plugins plugins-force

plugins: $(PLUGIN_WASMS) ## build the example plugins into examples/plugins/bin/

# Always run go build, which knows better than make whether anything changed.
$(PLUGINS_DIR)/bin/%.wasm: plugins-force
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $@ ./$(PLUGINS_DIR)/$*

plugins-force:

clean-plugins:
	rm -rf $(PLUGINS_DIR)/bin
