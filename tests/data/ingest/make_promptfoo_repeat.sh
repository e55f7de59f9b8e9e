#!/bin/sh
# Regenerate promptfoo-repeat.json: promptfoo 0.123.1 (Node.js >= 22.22) against evalkit's
# scripted server on loopback. CI cannot run promptfoo: the committed output is the fixture.
#   PROMPTFOO=/path/to/node_modules/.bin/promptfoo sh tests/data/ingest/make_promptfoo_repeat.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
evalkit serve --scripted promptfoo-repeat-script.json -- sh -c \
  'OPENAI_BASE_URL=$EVALKIT_BASE_URL OPENAI_API_KEY=sk-local PROMPTFOO_DISABLE_TELEMETRY=1 PROMPTFOO_DISABLE_UPDATE=1 \
   "$0" eval -c promptfooconfig-repeat.yaml --repeat 3 --no-cache -j 1 --no-table -o promptfoo-repeat.json' \
  "${PROMPTFOO:-promptfoo}"
