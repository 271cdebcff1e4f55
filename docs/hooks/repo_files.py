"""MkDocs hook: the pages link repository files by their relative path from docs/ (``../figures/readme/...png``,
``../models/pretrained/NAME/README.md``, ``../analyses/calibration.py``), so the same links work on GitHub and
in the built site. MkDocs only knows files under docs/; this hook adds every repository file a page links
to, copied into the site under ``repo/``, so strict mode still fails on a link to a file that does not exist."""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

LINK = re.compile(r"\]\((\.\./[^)\s#]+)")  # markdown links and images: ](../path) or ](../path#anchor)


def on_files(files: Files, config) -> Files:
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    added: set[str] = set()
    for page in list(files.documentation_pages()):
        text = Path(page.abs_src_path).read_text(encoding="utf-8")
        base = Path(page.abs_src_path).parent
        for link in LINK.findall(text):
            target = (base / link).resolve()
            if docs in target.parents or not target.is_file() or root not in target.parents:
                continue  # inside docs/ (MkDocs' own), missing (strict mode reports it) or outside the repo
            rel_docs = Path(*([".."] + list(target.relative_to(root).parts))).as_posix()  # ../figures/...
            if rel_docs in added:
                continue
            added.add(rel_docs)
            files.append(File(rel_docs, str(docs), config["site_dir"], config["use_directory_urls"],
                              dest_uri="repo/" + target.relative_to(root).as_posix(),
                              inclusion=InclusionLevel.NOT_IN_NAV))
    return files
