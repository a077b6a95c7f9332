#!/usr/bin/env bash
# The bench's peers and load generators are in scripts/deps.txt with
# everything else the tests run; this installs that one list.
exec "$(dirname "$0")/../scripts/install-deps.sh"
