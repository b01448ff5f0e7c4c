#!/usr/bin/env bash
# End-to-end checks of `trainer-ckpt`, driven by CTest (tests/e2e/ckpt/CMakeLists.txt).
# Environment (set by CTest): CKPT_TOOL, MAKE_CKPT (make_test_checkpoint), CHECK
# (check_ckpt.py), PYTHON (/usr/bin/python3), H5DUMP, WORK (scratch dir), MPIEXEC, NPFLAG.
# NAME is a checkpoint $WORK/NAME.h5 written by `make`. NP 1 runs without mpirun.
#   make NAME NP [--bf16]    write the synthetic checkpoint at NP ranks
#   info NAME                info names the run state, every layout row and the sizes
#   info-config NAME         info --config prints the stored config text
#   verify NAME NP           exit 0, one "ok" line per dataset
#   damaged NAME NP          one byte flipped inside /state/exp_avg (offset from info):
#                            exit 2, one error line naming /state/exp_avg, the others ok
#   export-npy NAME          one parameter to .npy; values checked with numpy
#   export-h5 NAME           all parameters, then a selection of exp_avg, to .h5; checked with h5py
#   h5py NAME:NP...          check_ckpt.py params on each checkpoint written by NP ranks: the format
#                            bounds, every attribute, every crc32 recomputed, /params/<name> by name
#   h5dump NAME              h5dump -d /params/wte.weight prints the known values
#   bad-input NAME           missing / not HDF5 / foreign file, unknown --param, bad arguments:
#                            exit 2 and exactly one "error: " line on stderr
#   root-crc NAME NP         one root attribute (samples_seen) rewritten with h5py: verify (at NP
#                            ranks) refuses it with exit 2 naming the root attributes' CRC; with
#                            meta_crc32 deleted (a file written before it existed) verify accepts it
#   export-symlink NAME      OUT.partial is a symbolic link to another file: the export removes the
#                            link, writes its own file, and the link's target is untouched
#   help                     --help of the tool and of each subcommand, --version
set -uo pipefail

die() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$WORK"

# tool TAG NP args...: runs trainer-ckpt (under mpirun when NP > 1); sets $rc,
# leaves stdout in $WORK/TAG.out and stderr in $WORK/TAG.err, and shows both.
tool() {
  local tag=$1 np=$2; shift 2
  if [[ $np -gt 1 ]]; then
    timeout 60 "$MPIEXEC" "$NPFLAG" "$np" "$CKPT_TOOL" "$@" > "$WORK/$tag.out" 2> "$WORK/$tag.err"
  else
    timeout 60 "$CKPT_TOOL" "$@" > "$WORK/$tag.out" 2> "$WORK/$tag.err"
  fi
  rc=$?
  echo "--- trainer-ckpt $* (np $np): exit $rc"
  sed 's/^/  out| /' "$WORK/$tag.out"
  sed 's/^/  err| /' "$WORK/$tag.err"
}
expect_rc() { [[ $rc -eq $1 ]] || die "exit code $rc, expected $1"; }
need() {  # TAG REGEX...: every REGEX matches a line of TAG's stdout
  local tag=$1; shift
  for re in "$@"; do grep -Eq -- "$re" "$WORK/$tag.out" || die "$tag: no output line matches '$re'"; done
}
no_stderr() { [[ ! -s "$WORK/$1.err" ]] || die "$1: unexpected output on stderr"; }
one_error() {  # TAG REGEX: stderr is exactly one line "error: ..." matching REGEX
  local tag=$1 re=$2
  [[ $(wc -l < "$WORK/$tag.err") -eq 1 ]] || die "$tag: expected exactly one line on stderr"
  grep -Eq -- "^error: .*$re" "$WORK/$tag.err" || die "$tag: stderr does not match 'error: ...$re'"
}
check() { "$PYTHON" "$CHECK" "$@" || die "check_ckpt.py $*"; }
ckpt() { echo "$WORK/$1.h5"; }

case "${1:-}" in
  make)
    name=$2; np=$3; shift 3
    rm -f "$(ckpt "$name")"
    if [[ $np -gt 1 ]]; then
      timeout 60 "$MPIEXEC" "$NPFLAG" "$np" "$MAKE_CKPT" "$(ckpt "$name")" "$@"
    else
      timeout 60 "$MAKE_CKPT" "$(ckpt "$name")" "$@"
    fi || die "make_test_checkpoint failed"
    [[ -s $(ckpt "$name") ]] || die "$(ckpt "$name") was not written"
    ;;
  info)
    name=$2
    tool info 1 info "$(ckpt "$name")"
    expect_rc 0; no_stderr info
    size=$(stat -c %s "$(ckpt "$name")")
    need info \
      '^  format +shardtrain-checkpoint, schema version 1$' \
      '^  written by +shardtrain test, 2026-11-23T12:00:00Z$' \
      '^  step +42$' '^  optimizer updates +40$' '^  samples seen +1344$' '^  tokens seen +21504$' \
      '^  sampler seed +1234$' \
      '^  written with +world_size 2, zero_stage 1, precision bf16$' \
      '^  loss scaler +scale 1, good steps 0, hysteresis left 2, consecutive skips 0$' \
      '^  data +data/synthetic\.h5 \(train tokens 100000, vocab 65, seq_len 16\)$' \
      '^layout: 8 tensors, offsets aligned to 16 elements$' \
      '^  name +shape +offset +numel$' \
      '^  wte\.weight +\(65, 12\) +0 +780$' \
      '^  wpe\.weight +\(16, 12\) +784 +192$' \
      '^  h\.0\.ln_1\.weight +\(12,\) +976 +12$' \
      '^  h\.0\.ln_1\.bias +\(12,\) +992 +12$' \
      '^  h\.0\.attn\.c_attn\.weight +\(36, 12\) +1008 +432$' \
      '^  h\.0\.attn\.c_attn\.bias +\(36,\) +1440 +36$' \
      '^  h\.0\.attn\.c_proj\.weight +\(12, 12\) +1488 +144$' \
      '^  ln_f\.weight +\(12,\) +1632 +12$' \
      '^  parameters +1620 \(sum of numel\)$' \
      '^  padded size +1664 elements per state vector \(44 padding\)$' \
      '^  /state/master +float32 +6656 bytes \(6\.5 KiB\), file offset [0-9]+$' \
      '^  /state/exp_avg +float32 +6656 bytes \(6\.5 KiB\), file offset [0-9]+$' \
      '^  /state/exp_avg_sq +float32 +6656 bytes \(6\.5 KiB\), file offset [0-9]+$' \
      '^  /state/params_bf16 +bfloat16 +3328 bytes \(3\.2 KiB\), file offset [0-9]+$' \
      "^  file +$size bytes \\(.*; state vectors 22\\.8 KiB\\)$"
    echo "info names the run state, all 8 layout rows and the sizes"
    ;;
  info-config)
    name=$2
    tool info-config 1 info --config "$(ckpt "$name")"
    expect_rc 0; no_stderr info-config
    need info-config '^# synthetic checkpoint' '^\[model\]$' '^d_model = 12$' '^zero_stage = 1$'
    grep -q 'step' "$WORK/info-config.out" && die "--config printed more than the config text"
    echo "info --config prints the stored config"
    ;;
  verify)
    name=$2; np=$3
    tool "verify_${name}_np$np" "$np" verify "$(ckpt "$name")"
    expect_rc 0; no_stderr "verify_${name}_np$np"
    vectors=$([[ $name == bf16 ]] && echo "master exp_avg exp_avg_sq params_bf16" || echo "master exp_avg exp_avg_sq")
    need "verify_${name}_np$np" '^root attributes: crc32 [0-9]+, ok$' '^/config  ok$' '^/layout  ok$'
    for v in $vectors; do need "verify_${name}_np$np" "^/state/$v  ok  crc32 stored ([0-9]+), computed \\1$"; done
    n=$(( 2 + $(wc -w <<< "$vectors") ))
    [[ $(grep -c '  ok' "$WORK/verify_${name}_np$np.out") -eq $n ]] || die "expected $n ok lines"
    need "verify_${name}_np$np" ": ok, $n datasets, .* on $np rank"
    echo "verify: $n datasets ok at $np rank(s)"
    ;;
  damaged)
    name=$2; np=$3
    tool "damaged_info_np$np" 1 info "$(ckpt "$name")"
    expect_rc 0
    offset=$(sed -nE 's|^  /state/exp_avg +float32 +([0-9]+) bytes.*file offset ([0-9]+)$|\2|p' \
      "$WORK/damaged_info_np$np.out")
    [[ -n $offset ]] || die "info gave no file offset for /state/exp_avg"
    bad=$WORK/damaged_np$np.h5
    check flip "$(ckpt "$name")" "$bad" $((offset + 1000))   # element 250 of 1664
    tool "damaged_np$np" "$np" verify "$bad"
    expect_rc 2
    need "damaged_np$np" '^/config  ok$' '^/layout  ok$' '^/state/master  ok$' \
      '^/state/exp_avg  CHECKSUM MISMATCH$' '^/state/exp_avg_sq  ok$'
    # Under mpirun, mpirun adds its own notice of the non-zero exit; the tool prints one line.
    if [[ $np -gt 1 ]]; then
      [[ $(grep -c '^error: ' "$WORK/damaged_np$np.err") -eq 1 ]] || die "expected one error line"
      grep -Eq '^error: .*damaged_np3\.h5: dataset /state/exp_avg: checksum mismatch' \
        "$WORK/damaged_np$np.err" || die "error line does not name /state/exp_avg"
    else
      one_error "damaged_np$np" "damaged_np1\\.h5: dataset /state/exp_avg: checksum mismatch.*damaged"
    fi
    echo "a flipped byte in /state/exp_avg: exit 2, named, the other datasets ok"
    ;;
  export-npy)
    name=$2
    out=$WORK/c_attn.npy
    echo "stale" > "$out"   # an existing OUT is replaced
    tool export_npy 1 export "$(ckpt "$name")" "$out" --param h.0.attn.c_attn.weight
    expect_rc 0; no_stderr export_npy
    need export_npy 'c_attn\.npy: 1 parameter of master at step 42 \(432 float32 values'
    [[ -e $out.partial ]] && die "$out.partial left behind"
    check npy "$out" h.0.attn.c_attn.weight master
    tool export_npy_v 1 export --vector exp_avg_sq --param ln_f.weight "$(ckpt "$name")" "$WORK/ln_f_v.npy"
    expect_rc 0
    check npy "$WORK/ln_f_v.npy" ln_f.weight exp_avg_sq
    ;;
  export-h5)
    name=$2
    tool export_h5 1 export "$(ckpt "$name")" "$WORK/all.h5"
    expect_rc 0; no_stderr export_h5
    need export_h5 'all\.h5: 8 parameters of master at step 42 \(1620 float32 values'
    [[ -e $WORK/all.h5.partial ]] && die "all.h5.partial left behind"
    check h5 "$WORK/all.h5" master
    tool export_h5_sel 1 export "$(ckpt "$name")" "$WORK/sel.hdf5" --vector exp_avg \
      --param wte.weight --param h.0.ln_1.bias --param wte.weight
    expect_rc 0
    check h5 "$WORK/sel.hdf5" exp_avg wte.weight h.0.ln_1.bias
    ;;
  h5py)
    shift
    for named in "$@"; do check params "$(ckpt "${named%:*}")" "${named#*:}"; done
    ;;
  h5dump)
    name=$2
    [[ -n $H5DUMP ]] || die "h5dump not found (install hdf5-tools)"
    "$H5DUMP" -d /params/wte.weight "$(ckpt "$name")" > "$WORK/h5dump.out" 2>&1 || die "h5dump failed"
    head -12 "$WORK/h5dump.out"
    grep -q 'DATASET "/params/wte.weight"' "$WORK/h5dump.out" || die "h5dump: no dataset header"
    grep -q 'H5T_IEEE_F32LE' "$WORK/h5dump.out" || die "h5dump: not float32"
    grep -Eq 'DATASPACE +SIMPLE \{ \( 65, 12 \) / \( 65, 12 \) \}' "$WORK/h5dump.out" || die "h5dump: shape"
    # Row 0 is sin(0..11): 0, 0.841471, 0.909297, 0.14112, ...
    grep -Eq '\(0,0\): 0, 0\.841471, 0\.909297, 0\.14112, -0\.756802' "$WORK/h5dump.out" || die "h5dump: values"
    # One element by position: c_attn.weight[1, 0] is flat element 1008 + 12 = 1020.
    "$H5DUMP" -d /params/h.0.attn.c_attn.weight -s 1,0 -c 1,1 "$(ckpt "$name")" > "$WORK/h5dump2.out" 2>&1 ||
      die "h5dump -s -c failed"
    want=$("$PYTHON" -c 'import math; print("%g" % math.sin(1020))')
    grep -Eq "\\(1,0\\): $want\$" "$WORK/h5dump2.out" || die "h5dump: c_attn.weight[1,0] is not $want"
    echo "h5dump reads /params/wte.weight and c_attn.weight[1,0] = $want"
    ;;
  bad-input)
    name=$2
    good=$(ckpt "$name")
    for cmd in info verify; do
      tool "missing_$cmd" 1 $cmd "$WORK/no_such.h5"
      expect_rc 2; one_error "missing_$cmd" 'no_such\.h5: cannot open checkpoint: No such file or directory$'
    done
    tool missing_export 1 export "$WORK/no_such.h5" "$WORK/x.h5"
    expect_rc 2; one_error missing_export 'no_such\.h5: cannot open checkpoint'
    printf 'not an HDF5 file\n' > "$WORK/not_hdf5.h5"
    for cmd in info verify; do
      tool "not_hdf5_$cmd" 1 $cmd "$WORK/not_hdf5.h5"
      expect_rc 2; one_error "not_hdf5_$cmd" 'not_hdf5\.h5: not an HDF5 file'
    done
    "$PYTHON" -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["format"] = np.bytes_("shardtrain-tokens")' "$WORK/foreign.h5" || die "cannot write foreign.h5"
    tool foreign 1 info "$WORK/foreign.h5"
    expect_rc 2; one_error foreign "foreign\\.h5: not a shardtrain checkpoint \\(format attribute is 'shardtrain-tokens'"
    rm -f "$WORK/unknown.h5"
    tool unknown_param 1 export "$good" "$WORK/unknown.h5" --param h.0.attn.c_atn.weight
    expect_rc 2
    one_error unknown_param "no parameter 'h\\.0\\.attn\\.c_atn\\.weight' in the checkpoint; close names: h\\.0\\.attn\\.c_attn\\.weight"
    [[ -e $WORK/unknown.h5 || -e $WORK/unknown.h5.partial ]] && die "a failed export left a file"
    tool unknown_param2 1 export "$good" "$WORK/unknown.h5" --param c_attn.weight
    expect_rc 2; one_error unknown_param2 "no parameter 'c_attn\\.weight'.*close names: h\\.0\\.attn\\.c_attn\\.weight"
    tool unknown_param3 1 export "$good" "$WORK/unknown.h5" --param zzzzzzzz
    expect_rc 2; one_error unknown_param3 "no parameter 'zzzzzzzz' in the checkpoint \\(it has 8 parameters"
    tool param_two_values 1 export "$good" "$WORK/p.h5" --param wte.weight wpe.weight   # one name per --param
    expect_rc 2; one_error param_two_values 'not expected: wpe\.weight'
    tool bad_ext 1 export "$good" "$WORK/out.txt"
    expect_rc 2; one_error bad_ext 'out\.txt: output must end in \.h5 or \.hdf5'
    tool npy_all 1 export "$good" "$WORK/all.npy"
    expect_rc 2; one_error npy_all 'all\.npy: a \.npy file holds one array; give exactly one --param'
    tool npy_two 1 export "$good" "$WORK/two.npy" --param wte.weight --param wpe.weight
    expect_rc 2; one_error npy_two 'two\.npy: a \.npy file holds one array'
    tool bad_vector 1 export "$good" "$WORK/v.h5" --vector params_bf16
    expect_rc 2; one_error bad_vector '--vector: params_bf16 not in \{master,exp_avg,exp_avg_sq\}'
    tool self 1 export "$good" "$good"
    expect_rc 2; one_error self 'is the checkpoint itself'
    tool unwritable 1 export "$good" /nonexistent_dir/out.h5
    expect_rc 2; one_error unwritable '/nonexistent_dir/out\.h5: cannot create: No such file or directory'
    tool no_sub 1
    expect_rc 2; one_error no_sub 'A subcommand is required'
    tool no_ckpt 1 verify
    expect_rc 2; one_error no_ckpt 'CKPT is required'
    tool extra 1 info "$good" extra
    expect_rc 2; one_error extra 'extra'
    # The good checkpoint is untouched by all of this.
    tool still_good 1 verify "$good"
    expect_rc 0
    echo "bad input: exit 2 and one error line each"
    ;;
  root-crc)
    name=$2; np=$3
    edited=$WORK/root_crc_np$np.h5
    cp "$(ckpt "$name")" "$edited"
    "$PYTHON" -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs["samples_seen"] = np.int64(int(f.attrs["samples_seen"]) + 8)' "$edited" || die "h5py cannot edit $edited"
    tool "root_crc_np$np" "$np" verify "$edited"
    expect_rc 2
    [[ $(grep -c '^error: ' "$WORK/root_crc_np$np.err") -eq 1 ]] || die "expected one error line"
    grep -Eq "^error: .*root_crc_np$np\.h5: root attributes: checksum mismatch \(stored meta_crc32 [0-9]+, the attributes give [0-9]+\): the file is damaged" \
      "$WORK/root_crc_np$np.err" || die "the error does not name the root attributes' checksum"
    # A file from before the root CRC: read as before, and said so.
    "$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f.attrs["meta_crc32"]' "$edited" || die "h5py cannot edit $edited"
    tool "root_crc_old_np$np" "$np" verify "$edited"
    expect_rc 0
    need "root_crc_old_np$np" '^root attributes: no CRC \(written before shardtrain recorded one\)$'
    echo "root attributes: an edited value is refused (exit 2), a file without the CRC is read"
    ;;
  export-symlink)
    name=$2
    victim=$WORK/victim.txt out=$WORK/sym_out.h5
    echo precious > "$victim"
    rm -f "$out" "$out.partial"
    ln -s "$victim" "$out.partial"
    tool export_symlink 1 export "$(ckpt "$name")" "$out" --param wte.weight
    expect_rc 0
    [[ "$(cat "$victim")" == precious ]] || die "the export wrote through the symbolic link OUT.partial"
    [[ -f "$out" && ! -L "$out" && ! -e "$out.partial" ]] || die "$out is not the export's own regular file"
    "$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r") as f: assert "wte.weight" in f' "$out" || die "$out holds no wte.weight"
    echo "export: a symbolic link at OUT.partial is removed, never followed"
    ;;
  help)
    tool help 1 --help
    expect_rc 0
    need help '^Usage: .*trainer-ckpt \[OPTIONS\] SUBCOMMAND' '^  info +Print what a checkpoint holds' \
      '^  verify +Check the CRC-32' '^  export +Write parameters' 'Exit codes: 0 success, 2 bad input'
    tool help_info 1 info --help
    expect_rc 0; need help_info 'Usage: .*info \[OPTIONS\] CKPT' '--config'
    tool help_verify 1 verify --help
    expect_rc 0; need help_verify 'Usage: .*verify \[OPTIONS\] CKPT' 'mpirun -n N'
    tool help_export 1 export --help
    expect_rc 0; need help_export 'Usage: .*export \[OPTIONS\] CKPT OUT' '--param NAME' '--vector' '\.partial'
    tool version 1 --version
    expect_rc 0; need version '^trainer-ckpt \(shardtrain [0-9]+\.[0-9]+\.[0-9]+\)$'
    ;;
  *)
    die "unknown case '${1:-}'"
    ;;
esac
exit 0
