#!/bin/sh
# Regenerate lm-eval/scripted/: lm-evaluation-harness 0.4.13 (`pip install "lm-eval[api]==0.4.13"`
# in a scratch venv) with its `local-completions` model against evalkit's scripted server,
# `--log_samples`, the task in lm-eval-task/ (6 docs, `repeats: 3`, filters `first` and `maj@3`).
#   LM_EVAL=/path/to/venv/bin/lm_eval sh tests/data/ingest/make_lm_eval_samples.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
rm -rf lm-eval
HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 evalkit serve --scripted lm-eval-task/script.json -- sh -c \
  '"$0" --model local-completions --tasks capitals --include_path lm-eval-task --log_samples \
   --output_path lm-eval --seed 1 \
   --model_args "model=scripted,base_url=$EVALKIT_BASE_URL/completions,tokenizer_backend=None,num_concurrent=1,max_retries=1"' \
  "${LM_EVAL:-lm_eval}"
