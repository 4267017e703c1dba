#!/usr/bin/env bash
# Seeds the fuzz corpora from the golden captures in jute/tests/fixtures/frames:
# frame_decoder gets each scenario's client->server and server->client byte streams whole;
# request_decoder gets every request frame body (length prefix stripped).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
frames="$here/../tests/fixtures/frames"
mkdir -p "$here/corpus/frame_decoder" "$here/corpus/request_decoder"
for dir in "$frames"/*/; do
  name=$(basename "$dir")
  cat "$dir"/*-c2s.bin > "$here/corpus/frame_decoder/$name-c2s"
  cat "$dir"/*-s2c.bin > "$here/corpus/frame_decoder/$name-s2c"
done
tail -n +2 "$frames/manifest.tsv" | while IFS=$'\t' read -r file dir kind rest; do
  case "$kind" in
    request|ping_request|auth_request|set_watches_request)
      tail -c +5 "$frames/$file" > "$here/corpus/request_decoder/$(echo "$file" | tr / _)";;
  esac
done
echo "seeded: $(ls "$here/corpus/frame_decoder" | wc -l) streams, $(ls "$here/corpus/request_decoder" | wc -l) requests"
