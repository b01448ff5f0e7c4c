#!/usr/bin/env python3
"""Small helpers for share/gpu/on-device.sh (runs on the GPU machine; Python 3.8+).

  extract-deb DEB DIR          unpack a .deb's data archive into DIR (used only when
                               dpkg-deb is missing: on-device.sh uses dpkg -x)
  wheel-dirs                   print the lib/ folders of the nvidia-* pip wheels,
                               cuDNN's and NCCL's first
  test-scripts JSON DIR        from `ctest --show-only=json-v1`, write DIR/<test>.sh
                               per test: it runs the test's command with its
                               environment and working directory, with "$@" placed
                               before the test executable (after mpiexec and its
                               options when the command is an mpiexec line), so
                               `DIR/t.sh compute-sanitizer --tool memcheck` checks
                               the test binary itself; DIR/tests.tsv lists
                               name<TAB>timeout
"""
import io
import json
import os
import shlex
import sys
import tarfile


def extract_deb(deb, dest):
    with open(deb, "rb") as f:
        data = f.read()
    if not data.startswith(b"!<arch>\n"):
        sys.exit(f"{deb}: not an ar archive")
    pos = 8
    while pos + 60 <= len(data):
        name = data[pos:pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                sys.exit(f"{deb}: {name} is zstd-compressed and dpkg-deb is missing")
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as t:
                t.extractall(dest)
            return
    sys.exit(f"{deb}: no data.tar member")


def wheel_dirs():
    out = []
    try:
        import importlib
        for mod in ("nvidia.cudnn", "nvidia.nccl"):
            try:
                m = importlib.import_module(mod)
                for p in getattr(m, "__path__", []):
                    if os.path.isdir(os.path.join(p, "lib")):
                        out.append(os.path.join(p, "lib"))
            except Exception:
                pass
        import nvidia  # namespace package of every nvidia-* wheel
        for base in getattr(nvidia, "__path__", []):
            for sub in sorted(os.listdir(base)):
                lib = os.path.join(base, sub, "lib")
                if os.path.isdir(lib):
                    out.append(lib)
    except Exception:
        pass
    seen = set()
    for d in out:
        d = os.path.realpath(d)
        if d not in seen:
            seen.add(d)
            print(d)


def test_scripts(json_path, outdir):
    with open(json_path) as f:
        tests = json.load(f).get("tests", [])
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "tests.tsv"), "w") as tsv:
        for t in tests:
            cmd = t.get("command") or []
            if not cmd:
                continue
            props = {p["name"]: p["value"] for p in t.get("properties", [])}
            env = props.get("ENVIRONMENT", [])
            cwd = props.get("WORKING_DIRECTORY", os.path.dirname(cmd[0]))
            at = 0
            if os.path.basename(cmd[0]).startswith(("mpiexec", "mpirun", "orterun")):
                at = next((i for i, c in enumerate(cmd) if i > 0 and os.path.isfile(c) and os.access(c, os.X_OK)),
                          len(cmd))
            words = [shlex.quote(c) for c in cmd]
            words.insert(at, '"$@"')
            script = os.path.join(outdir, t["name"] + ".sh")
            with open(script, "w") as s:
                s.write("#!/usr/bin/env bash\n")
                s.write(f"cd {shlex.quote(cwd)} || exit 97\n")
                s.write("exec env " + " ".join(shlex.quote(e) for e in env) + " " + " ".join(words) + "\n")
            os.chmod(script, 0o755)
            tsv.write(f"{t['name']}\t{props.get('TIMEOUT', 0)}\n")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "extract-deb" and len(sys.argv) == 4:
        extract_deb(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2 and sys.argv[1] == "wheel-dirs":
        wheel_dirs()
    elif len(sys.argv) == 4 and sys.argv[1] == "test-scripts":
        test_scripts(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
