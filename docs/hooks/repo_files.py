"""MkDocs hook: the pages link repository files by their relative path from docs/ (``../figures/readme/...png``,
``../models/pretrained/NAME/README.md``, ``../analyses/calibration.py``), so the same links work on GitHub and
in the built site. MkDocs only knows files under docs/; this hook adds every repository file a page links
to, copied into the site under ``repo/``, so strict mode still fails on a link to a file that does not exist."""
from __future__ import annotations

import logging
import posixpath
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


log = logging.getLogger("mkdocs.hooks.repo_files")  # under "mkdocs": a warning here fails a strict build
HREF = re.compile(r'href="([^":#/][^":]*?\.(?:md|ipynb)(?:#[^"]*)?)"')


def on_page_content(html: str, page, config, files: Files) -> str:
    """A notebook's Markdown links (``../how-to/plugins.md``) are not resolved by MkDocs: point them at the
    pages' URLs here, and report a link to a page that does not exist, as MkDocs does for Markdown pages."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html

    def resolve(match):
        path, _, anchor = match.group(1).partition("#")
        target = files.get_file_from_path(posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), path)))
        if target is None:
            log.warning(f"Doc file '{page.file.src_uri}' links to '{match.group(1)}', which is not among the documentation files.")
            return match.group(0)
        return f'href="{target.url_relative_to(page.file)}{"#" + anchor if anchor else ""}"'

    return HREF.sub(resolve, html)
