"""The Korean-English glossary (docs/glossary.md): it maps the terms of learners' Korean notes, its links lead to
notebooks that exist, and the site's navigation lists it among the guides."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "docs" / "glossary.md"
# The Korean terms that learners' notes use most (issue 37), each of which must have its row.
NOTES_TERMS = ["어텐션 분포", "룩-어헤드 마스크", "교사 강요", "층 정규화", "셀프 어텐션", "멀티 헤드 어텐션",
               "위치 인코딩", "잔차 연결", "인코더", "디코더", "패딩 마스크", "레이블 스무딩",
               "빔 서치", "쿼리 / 키 / 값", "임베딩", "토큰화",
               # the notes' most frequent words (issue 43)
               "시점", "문장 행렬", "서브층", "병렬", "가중합", "가중평균", "정규화"]


def _rows() -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in GLOSSARY.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| Korean")]


def test_every_term_of_the_notes_has_a_row_with_english_and_a_notebook() -> None:
    rows = _rows()
    for term in NOTES_TERMS:
        matching = [row for row in rows if term in row[0]]
        assert matching, f"docs/glossary.md: no row for {term!r}"
        assert all(re.search(r"[A-Za-z]", row[1]) and "notebooks/" in row[3] for row in matching), matching


def test_every_notebook_link_exists() -> None:
    links = set(re.findall(r"\(\.\./(notebooks/[^)]+)\)", GLOSSARY.read_text()))
    assert links, "the glossary links no notebook"
    missing = sorted(link for link in links if not (ROOT / link).is_file())
    assert not missing, f"docs/glossary.md links notebooks that do not exist: {missing}"


def test_the_site_lists_the_glossary_among_its_guides(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    build_site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_site)
    (tmp_path / "api").mkdir()
    nav = build_site.stage(tmp_path / "work", executed=[], api=tmp_path / "api")
    guides = next(entry["Guides"] for entry in nav if "Guides" in entry)
    assert "docs/glossary.md" in guides
    assert (tmp_path / "work" / "docs" / "docs" / "glossary.md").read_text() == GLOSSARY.read_text()


def test_the_glossary_warns_that_jeongyuhwa_means_two_things() -> None:
    """정규화 translates both normalisation and regularisation: its own row and the warning say both."""
    text = GLOSSARY.read_text()
    row = next(row for row in _rows() if row[0] == "정규화")
    assert "normalisation" in row[1] and "regularisation" in row[1]
    warning = next(line for line in text.splitlines() if line.startswith("> **A warning: 정규화"))
    assert text.index(warning) < text.index("| 정규화 |")
