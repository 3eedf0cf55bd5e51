#!/usr/bin/env bash
# The simulation study of docs/clicks.md: logs from a LETOR training file (PBM, eta 1 and 2, 10% click
# noise, top 10, noisy label logging ranker, 100-200 sessions per query), then naive / IPS / DLA on
# the log and LambdaRank on the true labels of the same shown documents, tested on the test file.
# usage: bench/clicks_study.sh TRAIN TEST OUT [SEEDS...]
# VARIANTS="name:override,override ..." adds model=unbiased runs with those overrides (e.g. the clip CV:
# VARIANTS="clip0.05:model.clip=0.05 clip0.2:model.clip=0.2"); METHODS (default "none ips dla lambdarank")
# chooses the standard rows; SIMULATE adds simulator options (e.g. SIMULATE="--noise 2": a noisier logging ranker).
set -euo pipefail
train=$1; test=$2; out=$3; shift 3
seeds=${*:-1}
methods=${METHODS:-none ips dla lambdarank}
variants=${VARIANTS:-}
for eta in 1 2; do
  log=$out/log_eta$eta
  [ -f "$log/clicks.tsv" ] || python -m datamodules.clicks simulate --letor "$train" --out "$log" --eta $eta --seed $eta ${SIMULATE:-}
  for seed in $seeds; do
    for debias in none ips dla; do
      [[ " $methods " == *" $debias "* ]] || continue
      run=$out/eta$eta/$debias/$seed
      [ -f "$run/results.json" ] || python train.py model=unbiased model.debias=$debias data=clicks \
        data.features=$log/features.txt data.clicks=$log/clicks.tsv data.test="$test" seed=$seed \
        hydra.run.dir=$run logger=[] > "$out/eta$eta-$debias-$seed.log" 2>&1
    done
    for variant in $variants; do
      name=${variant%%:*}; overrides=${variant#*:}
      run=$out/eta$eta/$name/$seed
      # shellcheck disable=SC2086  # the overrides are separate words
      [ -f "$run/results.json" ] || python train.py model=unbiased ${overrides//,/ } data=clicks \
        data.features=$log/features.txt data.clicks=$log/clicks.tsv data.test="$test" seed=$seed \
        hydra.run.dir=$run logger=[] > "$out/eta$eta-$name-$seed.log" 2>&1
    done
    [[ " $methods " == *" lambdarank "* ]] || continue
    run=$out/eta$eta/lambdarank/$seed
    [ -f "$run/results.json" ] || python train.py model=lambdarank data=letor data.train=$log/shown_labeled.txt \
      data.test="$test" seed=$seed hydra.run.dir=$run logger=[] > "$out/eta$eta-lambdarank-$seed.log" 2>&1
  done
done
python -m bench.clicks_report "$out"
