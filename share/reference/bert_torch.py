#!/usr/bin/python3
"""BERT and DistilBERT sequence classifiers in PyTorch, in Hugging Face's module
structure (issue 48's reference; `transformers` is not needed or used).

The module trees reproduce Hugging Face's parameter names, so a state dict of
BertForSequenceClassification / DistilBertForSequenceClassification loads by
name, and so does our `encoder_classifier` with `model.layout = "bert"` or
`"distilbert"` after ours_to_hf():
  DistilBERT: distilbert.embeddings.{word_embeddings, position_embeddings,
    LayerNorm}, distilbert.transformer.layer.<l>.attention.{q_lin, k_lin, v_lin,
    out_lin}, .sa_layer_norm, .ffn.{lin1, lin2}, .output_layer_norm;
    pre_classifier, classifier.
  BERT: bert.embeddings.{word_embeddings, position_embeddings,
    token_type_embeddings, LayerNorm}, bert.encoder.layer.<l>.attention.self.
    {query, key, value}, .attention.output.{dense, LayerNorm}, .intermediate.dense,
    .output.{dense, LayerNorm}; bert.pooler.dense; classifier.
Post-LayerNorm blocks, GELU's exact erf form (Hugging Face's "gelu"), LayerNorm
eps 1e-12 (config), attention masked at the keys where attention_mask is 0
(the [PAD] positions beyond each row's length), token type 0, the [CLS] row
into BERT's pooler (Linear + tanh) or DistilBERT's pre_classifier (Linear +
ReLU), dropout (off: eval()), classifier. Written from the published model
description, not from our C++.

Our names (src/model/encoder_classifier.cpp) <-> Hugging Face's: wte / wpe /
wtt <-> word / position / token_type embeddings, ln_emb <-> embeddings.LayerNorm,
h.<l>.attn.c_attn (3C, C) = [query; key; value] rows, h.<l>.attn.c_proj <->
out_lin / attention.output.dense, h.<l>.ln_1 <-> sa_layer_norm /
attention.output.LayerNorm, h.<l>.mlp.c_fc <-> lin1 / intermediate.dense,
h.<l>.mlp.c_proj <-> lin2 / output.dense, h.<l>.ln_2 <-> output_layer_norm /
output.LayerNorm, pooler / pre_classifier, head <-> classifier.

Usage (/usr/bin/python3 with python3-torch and python3-h5py):
  bert_torch.py parity DUMP.h5
    DUMP.h5 as tests/parity/bert_parity_dump writes it (attrs layout, n_head,
    eps, loss; /tokens, /lengths, /labels, /logits, /params/<ours>,
    /grads/<ours>): loads our weights through ours_to_hf() into the reference,
    runs the batch in float64 and prints the largest relative differences of the
    logits, the loss and each gradient (max |ours - ref| / max |ref| per
    tensor); exit 1 above 1e-5.
  bert_torch.py write-hf DIR --layout bert|distilbert --vocab V --dim C
                --layers L --heads H --positions P --labels K [--seed S] [--no-head | --mlm-head]
    A random model in Hugging Face's files: DIR/model.safetensors (float32,
    written by hand in the safetensors format) and DIR/config.json (the keys
    transformers writes for that model type). --no-head: the base model only
    (BertModel / DistilBertModel names, no classifier). --mlm-head: a
    pretraining checkpoint as published (distilbert-base-uncased is a
    DistilBertForMaskedLM: vocab_transform, vocab_layer_norm, vocab_projector;
    bert-base-uncased a BertForPreTraining: cls.predictions.*,
    cls.seq_relationship.*), no classifier.
    (BertModel / DistilBertModel names, no classifier).
  bert_torch.py logits DIR DATA.h5 [--rows N]
    The reference's logits (float64) of the first N validation documents of a
    shardtrain sample set (/val/inputs, /val/lengths, /val/labels) under the weights and
    config of DIR (a folder as write-hf writes it, or a `trainer-ckpt export
    --names bert|distilbert` output); prints one line "logits r: x y ..." per row.
    --seq-len T (both commands): the first T ids of each row, as model.seq_len
    cuts them: a row longer than T ends in the set's [SEP] (its sep_id attribute).
  bert_torch.py eval DIR DATA.h5
    The mean cross-entropy over the whole validation split; prints "val_loss X rows N".
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5


# --- DistilBERT ---------------------------------------------------------------

class DistilEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], cfg["dim"])
        self.LayerNorm = nn.LayerNorm(cfg["dim"], eps=1e-12)
        self.dropout = nn.Dropout(cfg.get("dropout", 0.1))

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        return self.dropout(self.LayerNorm(self.word_embeddings(ids) + self.position_embeddings(pos)[None]))


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, keep):
        return self.out_lin(attend(self.q_lin(x), self.k_lin(x), self.v_lin(x), keep, self.heads))


def attend(q, k, v, keep, heads):
    """Softmax(q k^T / sqrt(d)) v per head; keys where keep is False get -inf."""
    B, T, C = q.shape
    q, k, v = (z.view(B, T, heads, C // heads).transpose(1, 2) for z in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // heads)
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)


class FFN(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.lin2(F.gelu(self.lin1(x)))  # the exact erf GELU


class DistilBlock(nn.Module):
    def __init__(self, cfg, eps):
        super().__init__()
        self.attention = MultiHeadSelfAttention(cfg["dim"], cfg["n_heads"])
        self.sa_layer_norm = nn.LayerNorm(cfg["dim"], eps=eps)
        self.ffn = FFN(cfg["dim"], cfg["hidden_dim"])
        self.output_layer_norm = nn.LayerNorm(cfg["dim"], eps=eps)

    def forward(self, x, keep):
        x = self.sa_layer_norm(x + self.attention(x, keep))
        return self.output_layer_norm(x + self.ffn(x))


class DistilTransformer(nn.Module):
    def __init__(self, cfg, eps):
        super().__init__()
        self.layer = nn.ModuleList(DistilBlock(cfg, eps) for _ in range(cfg["n_layers"]))


class DistilBertModel(nn.Module):
    def __init__(self, cfg, eps=1e-12):
        super().__init__()
        self.embeddings = DistilEmbeddings(cfg)
        self.embeddings.LayerNorm.eps = eps
        self.transformer = DistilTransformer(cfg, eps)

    def forward(self, ids, keep):
        x = self.embeddings(ids)
        for block in self.transformer.layer:
            x = block(x, keep)
        return x


class DistilBertForSequenceClassification(nn.Module):
    def __init__(self, cfg, eps=1e-12):
        super().__init__()
        self.distilbert = DistilBertModel(cfg, eps)
        self.pre_classifier = nn.Linear(cfg["dim"], cfg["dim"])
        self.classifier = nn.Linear(cfg["dim"], cfg["num_labels"])
        self.dropout = nn.Dropout(cfg.get("seq_classif_dropout", 0.2))

    def forward(self, ids, keep):
        h = self.distilbert(ids, keep)[:, 0]
        return self.classifier(self.dropout(F.relu(self.pre_classifier(h))))


# --- BERT ---------------------------------------------------------------------

class BertEmbeddings(nn.Module):
    def __init__(self, cfg, eps):
        super().__init__()
        C = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], C)
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], C)
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], C)
        self.LayerNorm = nn.LayerNorm(C, eps=eps)
        self.dropout = nn.Dropout(cfg.get("hidden_dropout_prob", 0.1))

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        types = torch.zeros_like(ids)
        x = self.word_embeddings(ids) + self.position_embeddings(pos)[None] + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, C, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(C, C) for _ in range(3))

    def forward(self, x, keep):
        return attend(self.query(x), self.key(x), self.value(x), keep, self.heads)


class BertDenseLayerNorm(nn.Module):  # BertSelfOutput / BertOutput: LN(x + dense(h))
    def __init__(self, d_in, C, eps):
        super().__init__()
        self.dense = nn.Linear(d_in, C)
        self.LayerNorm = nn.LayerNorm(C, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, h, x):
        return self.LayerNorm(x + self.dropout(self.dense(h)))


class BertAttention(nn.Module):
    def __init__(self, C, heads, eps):
        super().__init__()
        self.self = BertSelfAttention(C, heads)
        self.output = BertDenseLayerNorm(C, C, eps)

    def forward(self, x, keep):
        return self.output(self.self(x, keep), x)


class BertIntermediate(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.dense = nn.Linear(C, hidden)

    def forward(self, x):
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, cfg, eps):
        super().__init__()
        C = cfg["hidden_size"]
        self.attention = BertAttention(C, cfg["num_attention_heads"], eps)
        self.intermediate = BertIntermediate(C, cfg["intermediate_size"])
        self.output = BertDenseLayerNorm(cfg["intermediate_size"], C, eps)

    def forward(self, x, keep):
        x = self.attention(x, keep)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, cfg, eps):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg, eps) for _ in range(cfg["num_hidden_layers"]))


class BertPooler(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.dense = nn.Linear(C, C)

    def forward(self, x):
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    def __init__(self, cfg, eps):
        super().__init__()
        self.embeddings = BertEmbeddings(cfg, eps)
        self.encoder = BertEncoder(cfg, eps)
        self.pooler = BertPooler(cfg["hidden_size"])

    def forward(self, ids, keep):
        x = self.embeddings(ids)
        for layer in self.encoder.layer:
            x = layer(x, keep)
        return self.pooler(x)


class BertForSequenceClassification(nn.Module):
    def __init__(self, cfg, eps=None):
        super().__init__()
        eps = cfg.get("layer_norm_eps", 1e-12) if eps is None else eps
        self.bert = BertModel(cfg, eps)
        self.dropout = nn.Dropout(cfg.get("hidden_dropout_prob", 0.1))
        self.classifier = nn.Linear(cfg["hidden_size"], cfg["num_labels"])

    def forward(self, ids, keep):
        return self.classifier(self.dropout(self.bert(ids, keep)))


def build(cfg, eps=None):
    if "num_labels" not in cfg:  # transformers writes id2label; num_labels is its length
        cfg = dict(cfg, num_labels=len(cfg.get("id2label", {"0": 0, "1": 1})))
    if cfg["model_type"] == "distilbert":
        return DistilBertForSequenceClassification(cfg, 1e-12 if eps is None else eps)
    return BertForSequenceClassification(cfg, eps)


# --- names ----------------------------------------------------------------------

def block_names(layout, l):
    """Our block tensor leaf -> Hugging Face's names (c_attn maps to three)."""
    if layout == "distilbert":
        p = f"distilbert.transformer.layer.{l}."
        return {"attn.c_attn": [p + "attention.q_lin", p + "attention.k_lin", p + "attention.v_lin"],
                "attn.c_proj": p + "attention.out_lin", "ln_1": p + "sa_layer_norm",
                "mlp.c_fc": p + "ffn.lin1", "mlp.c_proj": p + "ffn.lin2", "ln_2": p + "output_layer_norm"}
    p = f"bert.encoder.layer.{l}."
    return {"attn.c_attn": [p + "attention.self.query", p + "attention.self.key", p + "attention.self.value"],
            "attn.c_proj": p + "attention.output.dense", "ln_1": p + "attention.output.LayerNorm",
            "mlp.c_fc": p + "intermediate.dense", "mlp.c_proj": p + "output.dense", "ln_2": p + "output.LayerNorm"}


def ours_to_hf(layout, ours):
    """Our tensors by name -> Hugging Face's (c_attn split row-wise into q, k, v)."""
    base = "distilbert.embeddings." if layout == "distilbert" else "bert.embeddings."
    fixed = {"wte.weight": base + "word_embeddings.weight", "wpe.weight": base + "position_embeddings.weight",
             "wtt.weight": base + "token_type_embeddings.weight", "ln_emb.weight": base + "LayerNorm.weight",
             "ln_emb.bias": base + "LayerNorm.bias", "head.weight": "classifier.weight", "head.bias": "classifier.bias",
             "pre_classifier.weight": "pre_classifier.weight", "pre_classifier.bias": "pre_classifier.bias",
             "pooler.weight": "bert.pooler.dense.weight", "pooler.bias": "bert.pooler.dense.bias"}
    hf = {}
    for name, t in ours.items():
        if name in fixed:
            hf[fixed[name]] = t
            continue
        _, l, rest = name.split(".", 2)
        leaf, kind = rest.rsplit(".", 1)
        target = block_names(layout, int(l))[leaf]
        if isinstance(target, list):
            for part, chunk in zip(target, torch.chunk(t, 3, dim=0)):
                hf[f"{part}.{kind}"] = chunk
        else:
            hf[f"{target}.{kind}"] = t
    return hf


def hf_grads_to_ours(layout, model, ours_names):
    """The reference's gradients under our names (q, k, v grads stacked back)."""
    g = {n: p.grad for n, p in model.named_parameters()}
    out = {}
    for name in ours_names:
        probe = ours_to_hf(layout, {name: torch.zeros(3, 1)})
        parts = [g[k] for k in probe]
        out[name] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    return out


def config_from_ours(layout, params, n_head, classes):
    V, C = params["wte.weight"].shape
    P = params["wpe.weight"].shape[0]
    L = sum(1 for n in params if n.endswith(".ln_1.weight"))
    hidden = params["h.0.mlp.c_fc.weight"].shape[0]
    if layout == "distilbert":
        return {"model_type": "distilbert", "vocab_size": V, "dim": C, "n_layers": L, "n_heads": n_head,
                "hidden_dim": hidden, "max_position_embeddings": P, "num_labels": classes}
    return {"model_type": "bert", "vocab_size": V, "hidden_size": C, "num_hidden_layers": L,
            "num_attention_heads": n_head, "intermediate_size": hidden, "max_position_embeddings": P,
            "type_vocab_size": params["wtt.weight"].shape[0], "num_labels": classes}


# --- commands -----------------------------------------------------------------

def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def parity(path):
    import h5py
    with h5py.File(path, "r") as f:
        layout = f.attrs["layout"]
        layout = layout.decode() if isinstance(layout, bytes) else str(layout)
        n_head, eps, ours_loss = int(f.attrs["n_head"]), float(f.attrs["eps"]), float(f.attrs["loss"])
        params = {n: torch.tensor(np.asarray(f["params"][n]), dtype=torch.float64) for n in f["params"]}
        grads = {n: np.asarray(f["grads"][n]) for n in f["grads"]}
        tokens = torch.from_numpy(np.asarray(f["tokens"]).astype(np.int64))
        lengths = torch.from_numpy(np.asarray(f["lengths"]).astype(np.int64))
        labels = torch.from_numpy(np.asarray(f["labels"]).astype(np.int64))
        ours_logits = np.asarray(f["logits"])
    classes = params["head.weight"].shape[0]
    model = build(config_from_ours(layout, params, n_head, classes), eps).double().eval()
    model.load_state_dict(ours_to_hf(layout, params), strict=True)  # every name, both ways
    keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    logits = model(tokens, keep)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    ref = hf_grads_to_ours(layout, model, list(params))
    worst = [("logits", rel(ours_logits, logits.detach().numpy())),
             ("loss", abs(ours_loss - loss.item()) / abs(loss.item()))]
    worst += [(n, rel(grads[n], ref[n].numpy())) for n in params]
    bad = [(n, e) for n, e in worst if not e <= TOL]
    for n, e in worst:
        print(f"{n}: max rel diff {e:.3g}")
    print(f"bert_torch parity ({layout}, {len(params)} tensors, loss {loss.item():.9f}): "
          f"{'OK' if not bad else 'FAILED: ' + ', '.join(n for n, _ in bad)} (tolerance {TOL:g})")
    return 0 if not bad else 1


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().numpy().astype("<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F32": "<f4", "F16": "<f2"}
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        if h["dtype"] == "BF16":
            u = np.frombuffer(data[a:b], dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(data[a:b], dtype=kinds[h["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(arr.reshape(h["shape"]).copy())
    return out


def write_hf(args):
    torch.manual_seed(args.seed)
    if args.layout == "distilbert":
        cfg = {"architectures": ["DistilBertForSequenceClassification"], "model_type": "distilbert",
               "activation": "gelu", "vocab_size": args.vocab, "dim": args.dim, "n_layers": args.layers,
               "n_heads": args.heads, "hidden_dim": 4 * args.dim, "max_position_embeddings": args.positions,
               "dropout": 0.1, "attention_dropout": 0.1, "seq_classif_dropout": 0.2, "initializer_range": 0.02,
               "pad_token_id": 0, "sinusoidal_pos_embds": False, "tie_weights_": True, "qa_dropout": 0.1}
    else:
        cfg = {"architectures": ["BertForSequenceClassification"], "model_type": "bert", "hidden_act": "gelu",
               "vocab_size": args.vocab, "hidden_size": args.dim, "num_hidden_layers": args.layers,
               "num_attention_heads": args.heads, "intermediate_size": 4 * args.dim,
               "max_position_embeddings": args.positions, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
               "pad_token_id": 0, "position_embedding_type": "absolute"}
    cfg["id2label"] = {str(i): f"LABEL_{i}" for i in range(args.labels)}
    cfg["label2id"] = {f"LABEL_{i}": i for i in range(args.labels)}
    model = build(cfg)  # num_labels from id2label, as transformers derives it
    with torch.no_grad():  # weights away from their trivial values, so every tensor matters
        for n, p in model.named_parameters():
            if "LayerNorm" in n or "layer_norm" in n:
                p.copy_((1.0 if n.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    tensors = dict(model.state_dict())
    if args.mlm_head:  # the prefixed base model and a random pretraining head
        prefix, C, V = cfg["model_type"] + ".", args.dim, args.vocab
        tensors = {n: t for n, t in tensors.items() if n.startswith(prefix)}
        if args.layout == "distilbert":
            head = {"vocab_transform.weight": (C, C), "vocab_transform.bias": (C,), "vocab_layer_norm.weight": (C,),
                    "vocab_layer_norm.bias": (C,), "vocab_projector.weight": (V, C), "vocab_projector.bias": (V,)}
            cfg["architectures"] = ["DistilBertForMaskedLM"]
        else:
            head = {"cls.predictions.bias": (V,), "cls.predictions.transform.dense.weight": (C, C),
                    "cls.predictions.transform.dense.bias": (C,), "cls.predictions.transform.LayerNorm.weight": (C,),
                    "cls.predictions.transform.LayerNorm.bias": (C,), "cls.predictions.decoder.weight": (V, C),
                    "cls.seq_relationship.weight": (2, C), "cls.seq_relationship.bias": (2,)}
            cfg["architectures"] = ["BertForPreTraining"]
        tensors.update({n: 0.2 * torch.randn(*s) for n, s in head.items()})
    if args.no_head:
        prefix = cfg["model_type"] + "."
        tensors = {n[len(prefix):]: t for n, t in tensors.items() if n.startswith(prefix)}
        cfg["architectures"] = ["DistilBertModel" if args.layout == "distilbert" else "BertModel"]
    os.makedirs(args.dir, exist_ok=True)
    write_safetensors(os.path.join(args.dir, "model.safetensors"), tensors)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"bert_torch write-hf: {args.dir}: {len(tensors)} tensors")
    return 0


def load_dir(path):
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(path, "model.safetensors"))
    model = build(cfg).double().eval()
    model.load_state_dict({n: t.double() for n, t in tensors.items() if not n.endswith("position_ids")}, strict=True)
    return model


def val_rows(data, seq_len=0):
    """The validation split; seq_len > 0 cuts each row to its first seq_len ids,
    a row cut short ending in the set's [SEP] (attribute sep_id, when >= 0): what
    BERT's tokenizer gives at max_length seq_len."""
    import h5py
    with h5py.File(data, "r") as f:
        tokens = torch.from_numpy(np.asarray(f["val/inputs"]).astype(np.int64))
        lengths = torch.from_numpy(np.asarray(f["val/lengths"]).astype(np.int64))
        labels = torch.from_numpy(np.asarray(f["val/labels"]).astype(np.int64)) if "val/labels" in f else None
        sep = int(f.attrs.get("sep_id", -1))
    if seq_len and seq_len < tokens.shape[1]:
        cut = lengths > seq_len
        tokens, lengths = tokens[:, :seq_len].clone(), lengths.clamp(max=seq_len)
        if sep >= 0 and seq_len >= 2:
            tokens[cut, seq_len - 1] = sep
    return tokens, lengths, labels


def logits_cmd(args):
    model = load_dir(args.dir)
    tokens, lengths, _ = val_rows(args.data, args.seq_len)
    n = args.rows or tokens.shape[0]
    tokens, lengths = tokens[:n], lengths[:n]
    keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    with torch.no_grad():
        out = model(tokens, keep)
    for r in range(n):
        print(f"logits {r}: " + " ".join(f"{v:.9g}" for v in out[r].tolist()))
    return 0


def eval_cmd(args):
    model = load_dir(args.dir)
    tokens, lengths, labels = val_rows(args.data, args.seq_len)
    keep = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    with torch.no_grad():
        loss = F.cross_entropy(model(tokens, keep), labels, reduction="sum").item() / tokens.shape[0]
    print(f"val_loss {loss:.9f} rows {tokens.shape[0]}")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parity")
    p.add_argument("dump")
    w = sub.add_parser("write-hf")
    w.add_argument("dir")
    w.add_argument("--layout", choices=["bert", "distilbert"], required=True)
    for k in ("vocab", "dim", "layers", "heads", "positions", "labels"):
        w.add_argument("--" + k, type=int, required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--no-head", action="store_true")
    w.add_argument("--mlm-head", action="store_true")
    for name in ("logits", "eval"):
        q = sub.add_parser(name)
        q.add_argument("dir")
        q.add_argument("data")
        q.add_argument("--rows", type=int, default=0)
        q.add_argument("--seq-len", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.cmd == "parity":
        return parity(args.dump)
    if args.cmd == "write-hf":
        return write_hf(args)
    return logits_cmd(args) if args.cmd == "logits" else eval_cmd(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
