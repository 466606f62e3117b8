"""Reading BuildKit's cache records from 'docker buildx du --verbose' (buildx 0.13's layout)."""

from dockerarch import engine

DU = """ID:\t\tx5wwmzhzcr9rlll9o5tvvq65e
Parent:\t\tnf2rw6o4bgrn4vez3eutw3fmn
Created at:\t2026-11-28 18:31:19.918090173 +0000 UTC
Mutable:\ttrue
Reclaimable:\ttrue
Shared:\t\tfalse
Size:\t\t1.426GB
Description:\tmount / from exec /bin/sh -c DISK_ID=8783a01f ALIGN_MIB=4     sh /run/dockerarch/card/assemble /card /out/dockerarch-card-run-ab12
Usage count:\t1
Last used:\tAbout an hour ago
Type:\t\tregular

ID:\t\tq0kk1t7yqbvgkc2xg9wlp1pfi
Created at:\t2026-11-28 18:31:19 +0000 UTC
Reclaimable:\tfalse
Size:\t\t734MB
Description:\t[out 1/1] COPY --from=assemble /out/dockerarch-card-run-ab12/ /
Type:\t\tregular

ID:\t\tnf2rw6o4bgrn4vez3eutw3fmn
Size:\t\t0B
Type:\t\texec.cachemount

Reclaimable:\t27.4GB
Total:\t\t27.4GB
"""


def test_each_record_is_read_with_its_description_and_whether_a_build_holds_it() -> None:
    records = engine.parse_cache_records(DU)
    assert [r.id for r in records] == [
        "x5wwmzhzcr9rlll9o5tvvq65e", "q0kk1t7yqbvgkc2xg9wlp1pfi", "nf2rw6o4bgrn4vez3eutw3fmn"
    ]  # fmt: skip
    first, held, bare = records
    assert first.description.endswith("/card /out/dockerarch-card-run-ab12")
    assert first.size == "1.426GB" and first.reclaimable
    assert not held.reclaimable and held.description.startswith("[out 1/1] COPY")
    assert bare.description == "" and bare.reclaimable
    assert (first.kind, bare.kind) == ("regular", "exec.cachemount")


def test_the_totals_and_an_empty_listing_are_no_records() -> None:
    assert engine.parse_cache_records("Reclaimable:\t0B\nTotal:\t\t0B\n") == []
    assert engine.parse_cache_records("") == []
