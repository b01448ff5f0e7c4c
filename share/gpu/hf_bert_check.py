#!/usr/bin/env python3
"""Hugging Face transformers against our BERT family (issue 48): its own
DistilBertForSequenceClassification / BertForSequenceClassification on our
`trainer-ckpt export --names distilbert|bert`, and its BertTokenizer against
`trainer-data text --tokenizer wordpiece`.

  hf_bert_check.py [--model LAYOUT DIR DATA LOSS]... [--tokens VOCAB TEXT IDS]
                   [--client auto|transformers|stand-in] [--tol 1e-4] [--rows N]
  hf_bert_check.py write-text OUT      the test text (below) into OUT
  hf_bert_check.py toy-vocab OUT       a small vocab.txt (no bert-base-uncased here)

  --model   LAYOUT distilbert|bert; DIR the export (model.safetensors and the
            config.json written beside it); DATA the shardtrain sample set the
            model was trained on (/val/inputs, /val/lengths, /val/labels); LOSS
            our trainer's validation loss at the exported step (metrics.csv).
            Two comparisons, each its own line:
              "<layout> loss": the client's mean cross-entropy over the whole
              validation split (float32 logits, summed in float64) against LOSS,
              relative --tol: our trainer's own number (the run on the GPU), the
              most direct figure the trainer prints (it writes no per-row logits);
              "<layout> logits": the client's logits of the first --rows
              validation rows against share/reference/bert_torch.py's (float64,
              Hugging Face's module tree written by us) on the same export,
              max |client - ref| / max |ref| <= --tol. bert_torch.py equals our C++
              model's logits within 1e-5 in CI (tests/parity/bert_parity_dump), so
              this is transformers' logits against ours through that bridge.
  --tokens  VOCAB a vocab.txt; TEXT a UTF-8 text; IDS the shardtrain tokens file
            `trainer-data text TEXT IDS --tokenizer wordpiece --vocab VOCAB` wrote
            (/train/tokens then /val/tokens: the text's ids in order).
            transformers.BertTokenizer(VOCAB) (uncased: lower-casing, accent
            stripping) encodes TEXT without special tokens: the ids must be equal.
  --client  transformers: its models and tokenizer, refuse to run without it.
            stand-in: share/reference/bert_torch.py's model in float32 in its
            place, to check this script and the export where transformers is not
            installed; the logits and tokenizer lines then say NOT RUN (there is
            no client that is not ours). auto (default): transformers when it
            imports, else the stand-in, and the output says which ran.

With transformers the load is checked: from_pretrained(DIR) with no missing,
unexpected or mismatched key and every tensor of the file equal to the loaded
model's. Where from_pretrained cannot read model.safetensors because the
`safetensors` package is absent, the model is built by transformers from
config.json and the file's tensors (read here) loaded with load_state_dict(strict),
and the output says so.

Prints one "hf_bert_check: PASS|FAIL|NOT RUN: ..." line per comparison and a
last "hf_bert_check: PASS|FAIL: ..." line. Exit 0 no comparison failed (NOT RUN
lines are not failures, and say why), 1 a comparison failed or a load was not
exact, 2 bad input.
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# The test text: BERT's rules where they are easy to get wrong (accents and
# combining marks, CJK between letters, punctuation runs, control and format
# characters, U+FFFD, words over 100 characters, mixed scripts, digits).
TEXT = [
    "Fine-tuning DistilBERT: it's 3x faster (bf16), 6.4x with 4 GPUs -- 91-93% accuracy!",
    "RÉSUMÉ résumé Résumé; naïve coöperate Ñandú e\u0301clair Ｆｕｌｌ-width ＡＢＣ ｄｅｆ",
    "東京タワー and 北京大学は、「有名」です。한국어 텍스트 mixed中文words here",
    "zero\u200bwidth soft\u00adhyphen replacement\ufffdchar nul\u0000byte esc\u001b[0m bell\u0007 del\u007f",
    "x" * 101 + " " + "y" * 100 + " " + "ab" * 60,
    "<html><b>bold</b></html> a.b.c... ?!?! ((nested)) ~tilde~ ^caret^ `tick` |pipe| $5.00 €3,50",
    "Ahab's whale-boat: 'Thar she blows!' -- 1851, Chapter XXXVI. The Quarter-Deck.",
    "tab\tseparated\tvalues\r\nwindows line\r\n\u2028line separator\u2029paragraph",
    "Ελληνικά ΑΘΗΝΑ Москва МОСКВА İstanbul ǅemal ﬁnance ﬂow ℌilbert ①②③ ½ ²",
]


def say(line):
    print(f"hf_bert_check: {line}", flush=True)


def die(msg, code=2):
    print(f"hf_bert_check: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def reference():
    sys.path.insert(0, os.path.join(HERE, "..", "reference"))
    import bert_torch
    return bert_torch


CLASSES = {"distilbert": "DistilBertForSequenceClassification", "bert": "BertForSequenceClassification"}


def load_transformers(layout, folder, tensors):
    """The transformers model of LAYOUT from FOLDER, checked; (forward, how)."""
    import torch
    import transformers
    cls = getattr(transformers, CLASSES[layout])
    how = "from_pretrained"
    try:
        try:
            model, info = cls.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
        except TypeError:  # transformers 4.x: torch_dtype
            model, info = cls.from_pretrained(folder, torch_dtype=torch.float32, output_loading_info=True)
    except Exception as e:  # noqa: BLE001: only a missing safetensors package has a fallback
        if "safetensors" not in str(e).lower():
            raise
        config = transformers.AutoConfig.from_pretrained(folder)
        model = cls(config)
        state = {n: torch.from_numpy(np.array(t, dtype=np.float32)) for n, t in tensors.items()}
        res = model.load_state_dict(state, strict=False)
        info = {"missing_keys": res.missing_keys, "unexpected_keys": res.unexpected_keys}
        how = f"{cls.__name__}(config.json) + load_state_dict of the file's tensors (from_pretrained: {e})"
    model.eval()
    problems = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = [x for x in (info.get(key) or []) if not str(x).endswith("position_ids")]
        if v:
            problems.append(f"{key}: {list(v)[:6]}")
    state = model.state_dict()
    for name, value in tensors.items():
        value = np.asarray(value, dtype=np.float32)
        if name not in state:
            problems.append(f"{name} is not in the loaded model's state dict")
        elif tuple(state[name].shape) != tuple(value.shape):
            problems.append(f"{name}: loaded shape {tuple(state[name].shape)}, file {tuple(value.shape)}")
        elif not np.array_equal(state[name].detach().cpu().numpy(), value):
            problems.append(f"{name}: the loaded values differ from the file's")
    not_from_file = sorted({n for n, _ in model.named_parameters()} - set(tensors))
    if not_from_file:
        problems.append(f"parameters the file did not set (left at their random init): {not_from_file[:6]}")
    if problems:
        return None, f"{cls.__name__} did not load the export exactly: " + "; ".join(problems)
    how = (f"{cls.__name__} {how}, transformers {transformers.__version__}: {len(tensors)} tensors equal to "
           f"the file's, no missing/unexpected/mismatched key")
    return (lambda ids, keep: model(input_ids=ids, attention_mask=keep.long()).logits), how


def check_model(ref, client, layout, folder, data, ours, tol, rows):
    """Two comparisons (loss, logits); returns the number that failed."""
    import torch
    for p in ("config.json", "model.safetensors"):
        if not os.path.isfile(os.path.join(folder, p)):
            die(f"{folder}/{p}: missing (trainer-ckpt export CKPT {folder}/model.safetensors --names {layout} "
                f"writes both)")
    cfg = json.load(open(os.path.join(folder, "config.json")))
    if cfg.get("model_type") != layout:
        die(f"{folder}/config.json: model_type {cfg.get('model_type')!r}, not {layout}")
    tensors = {n: t.numpy() for n, t in ref.read_safetensors(os.path.join(folder, "model.safetensors")).items()}
    if client == "transformers":
        forward, how = load_transformers(layout, folder, tensors)
        if forward is None:
            say(f"FAIL: {layout} load: {how}")
            say(f"NOT RUN: {layout} loss and logits: the load failed (above)")
            return 1
    else:
        model = ref.load_dir(folder).float()
        forward = lambda ids, keep: model(ids, keep)
        how = "stand-in: share/reference/bert_torch.py in float32 (transformers is not installed here)"
    tokens, lengths, labels = ref.val_rows(data)
    if labels is None:
        die(f"{data}: no /val/labels")
    keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    bad = 0
    with torch.no_grad():
        logits = torch.cat([forward(tokens[i:i + 64], keep[i:i + 64]).float() for i in range(0, len(tokens), 64)])
        loss = float(torch.nn.functional.cross_entropy(logits.double(), labels, reduction="sum")) / len(tokens)
        r = abs(loss - ours) / abs(ours)
        ok = r <= tol
        bad += not ok
        say(f"{'PASS' if ok else 'FAIL'}: {layout} loss: {how}; {len(tokens)} validation rows of {tokens.shape[1]} "
            f"ids; loss {loss:.9f}, our trainer's {ours:.9f}, relative difference {r:.3g} (bound {tol:g})")
        n = min(rows, len(tokens))
        if client != "transformers":
            say(f"NOT RUN: {layout} logits: transformers is not installed here (the stand-in is the reference "
                f"itself; not a pass)")
        else:
            want = ref.load_dir(folder)(tokens[:n], keep[:n])  # float64
            got = logits[:n].double()
            d = float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)
            ok = d <= tol
            bad += not ok
            worst = int((got - want).abs().max(dim=1).values.argmax())
            say(f"{'PASS' if ok else 'FAIL'}: {layout} logits: {n} validation rows x {got.shape[1]} classes, "
                f"transformers against share/reference/bert_torch.py (float64) on the export: max |diff| / "
                f"max |ref| {d:.3g} (bound {tol:g}); row {worst}: {[round(v, 6) for v in got[worst].tolist()]} "
                f"against {[round(v, 6) for v in want[worst].tolist()]}")
    return bad


def check_tokens(client, vocab, text_path, ids_path):
    import h5py
    try:
        with h5py.File(ids_path, "r") as f:
            a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            ours = np.concatenate([f["train/tokens"][:], f["val/tokens"][:]]).astype(np.int64)
    except (OSError, KeyError) as e:
        die(f"{ids_path}: not a shardtrain tokens file: {e}")
    if a.get("tokenizer") != "wordpiece":
        die(f"{ids_path}: tokenizer {a.get('tokenizer')!r}, not wordpiece")
    if client != "transformers":
        say(f"NOT RUN: tokenizer: transformers is not installed here ({len(ours)} ids of ours, no "
            f"BertTokenizer to compare them with; not a pass)")
        return 0
    import transformers
    with open(vocab, encoding="utf-8") as f:
        entries = {t: i for i, t in enumerate(f.read().split("\n")[:-1])}
    if int(re.match(r"\d*", transformers.__version__).group() or 0) >= 5:  # v5: one tokenizers-backed class, vocab= a dict
        tok = transformers.BertTokenizer(vocab=dict(entries), do_lower_case=True)
    else:  # v4: the Python BertTokenizer reads vocab_file
        tok = transformers.BertTokenizer(vocab_file=vocab, do_lower_case=True)
    if tok.get_vocab() != entries:  # not the default 5-token vocabulary of a silently ignored argument
        say(f"FAIL: tokenizer: BertTokenizer's vocabulary ({len(tok.get_vocab())} entries) is not {vocab}'s "
            f"({len(entries)})")
        return 1
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    theirs = np.asarray(tok.encode(text, add_special_tokens=False), dtype=np.int64)
    kind = f"{type(tok).__name__}{' (fast)' if getattr(tok, 'is_fast', False) else ''}"
    if len(theirs) == len(ours) and (theirs == ours).all():
        say(f"PASS: tokenizer: transformers {transformers.__version__} {kind}({os.path.basename(vocab)}, "
            f"{len(entries)} entries, uncased) on {text_path} ({len(text)} characters): {len(ours)} ids, "
            f"equal to trainer-data's")
        return 0
    n = min(len(ours), len(theirs))
    i = next((k for k in range(n) if ours[k] != theirs[k]), n)
    names = lambda ids: [tok.convert_ids_to_tokens(int(x)) for x in ids]
    lo = max(0, i - 4)
    say(f"FAIL: tokenizer: trainer-data {len(ours)} ids, {kind} {len(theirs)}; first difference at id {i}: "
        f"ours {names(ours[lo:i + 6])} theirs {names(theirs[lo:i + 6])}")
    return 1


def toy_vocab(path):
    """[PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then ASCII punctuation and
    digits, a-z and ##a-##z, and whole words of the classifier fixture and TEXT."""
    words = ("the a ship whale sea captain deck rope sail wind storm harbour crew boat night day prize spam ham "
             "fine tuning faster with accuracy resume naive cafe here mixed words chapter she blows").split()
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    toks += [chr(c) for c in range(33, 127) if not chr(c).isupper()]  # punctuation, digits, a-z
    toks += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"] + words
    seen, out = set(), []
    for t in toks:
        if t not in seen:
            seen.add(t)
            out.append(t)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in out))
    print(f"hf_bert_check toy-vocab: {path}: {len(out)} tokens")
    return 0


def main(argv):
    if argv[:1] == ["write-text"] and len(argv) == 2:
        with open(argv[1], "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(TEXT) + "\n")
        return 0
    if argv[:1] == ["toy-vocab"] and len(argv) == 2:
        return toy_vocab(argv[1])
    ap = argparse.ArgumentParser(prog="hf_bert_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs=4, action="append", default=[], metavar=("LAYOUT", "DIR", "DATA", "LOSS"))
    ap.add_argument("--tokens", nargs=3, metavar=("VOCAB", "TEXT", "IDS"))
    ap.add_argument("--client", choices=("auto", "transformers", "stand-in"), default="auto")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--rows", type=int, default=32)
    a = ap.parse_args(argv)
    if not a.model and not a.tokens:
        die("nothing to check: give --model and/or --tokens")
    t0 = time.time()
    import torch
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    client = a.client
    try:
        import transformers  # noqa: F401
        have = True
    except ImportError as e:
        have, why = False, str(e)
    if client == "transformers" and not have:
        die(f"--client transformers: {why}")
    if client == "auto":
        client = "transformers" if have else "stand-in"
        if not have:
            say("transformers is not installed here: the loss uses the stand-in (bert_torch.py), "
                "the logits and the tokenizer are NOT RUN")
    ref = reference()
    bad = 0
    for layout, folder, data, loss in a.model:
        if layout not in CLASSES:
            die(f"--model: layout {layout!r}, expected distilbert or bert")
        try:
            ours = float(loss)
        except ValueError:
            die(f"--model {layout}: LOSS {loss!r} is not a number")
        bad += check_model(ref, client, layout, folder, data, ours, a.tol, a.rows)
    if a.tokens:
        bad += check_tokens(client, *a.tokens)
    say(f"{'PASS' if bad == 0 else 'FAIL'}: client {client}; {bad} comparison(s) failed; {time.time() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
