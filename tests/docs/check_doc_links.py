#!/usr/bin/env python3
"""Every relative link of the project's Markdown files resolves: the file (or folder)
it names exists and, for a #anchor into a Markdown file, that file has a heading with
that anchor, as GitHub makes it (lowercase; punctuation but '-' and '_' dropped;
spaces become '-'; the n-th repeat gets '-n'), or an <a name/id> of that name.

Usage: check_doc_links.py PROJECT_ROOT
Reads every *.md under PROJECT_ROOT but build trees (build*/), .git, gpu-bundle/,
gpu-run/, runs/ and node_modules/. Links inside ``` fences and links with a scheme
(https:, mailto:) are not checked. Prints one line per broken link (file:line:
link: why) and a count; exit 1 when any is broken, 0 otherwise."""
import os
import re
import sys
import unicodedata

SKIP_DIRS = re.compile(r'^(build.*|\.git|gpu-bundle|gpu-run|runs|node_modules)$')


def slug_base(text):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)  # a link in a heading: its text
    text = re.sub(r'<[^>]+>', '', text).replace('`', '').replace('*', '')
    kept = [ch for ch in text.strip().lower()
            if ch in ' -' or unicodedata.category(ch)[0] in 'LNM' or unicodedata.category(ch) == 'Pc']
    return ''.join(kept).replace(' ', '-')


def anchors(path, cache={}):
    if path not in cache:
        found, seen, fence = set(), {}, False
        with open(path, encoding='utf-8') as f:
            for line in f:
                if line.lstrip().startswith('```'):
                    fence = not fence
                    continue
                if fence:
                    continue
                heading = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
                if heading:
                    base = slug_base(heading.group(1))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    found.add(base if n == 0 else f'{base}-{n}')
                found.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', line))
        cache[path] = found
    return cache[path]


def links(path):
    fence = False
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith('```'):
                fence = not fence
                continue
            if fence:
                continue
            line = re.sub(r'`[^`]*`', '', line)  # code spans are not links
            for target in re.findall(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)', line):
                yield number, target
            for target in re.findall(r'^\[[^\]]+\]:\s*(\S+)', line):  # reference definitions
                yield number, target


def main():
    if len(sys.argv) != 2:
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    root = os.path.abspath(sys.argv[1])
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not SKIP_DIRS.match(d))
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith('.md')]
    checked = broken = 0
    for path in files:
        for number, target in links(path):
            if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target):
                continue
            checked += 1
            file_part, _, anchor = target.partition('#')
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            why = None
            if not os.path.exists(resolved):
                why = 'no such file or folder'
            elif anchor and not resolved.endswith('.md'):
                why = 'an anchor into a file that is not Markdown'
            elif anchor and anchor not in anchors(resolved):
                why = f'{os.path.relpath(resolved, root)} has no heading with the anchor #{anchor}'
            if why:
                broken += 1
                print(f'{os.path.relpath(path, root)}:{number}: ({target}): {why}')
    print(f'check_doc_links: {len(files)} Markdown files, {checked} relative links, {broken} broken')
    return 1 if broken else 0


if __name__ == '__main__':
    sys.exit(main())
