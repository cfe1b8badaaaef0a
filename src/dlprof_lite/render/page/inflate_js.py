"""A gzip reader in the page's JavaScript, so plotly.js is unpacked before the page loads.

Place in the pipeline: report (rendering; render/page/plotly_bundle.py puts :data:`GUNZIP` in
every page, before its loader). The page carries plotly.js gzip-compressed (about 2 MB
instead of 4.8: render/page/plotly_cache.py). The browser's own ``DecompressionStream`` unpacks
it only asynchronously, after the page's ``load`` event: a ``chromium --headless
--screenshot``, a print or a PDF export taken at ``load`` then shows white boxes where the
charts belong. This reader works synchronously inside the loader script, so plotly.js runs
and every chart is drawn while the page is still loading.

``gunzip(bytes)`` reads one gzip member (RFC 1952: the header's optional fields skipped, the
size taken from its trailer) whose data is DEFLATE (RFC 1951): stored, fixed-Huffman and
dynamic-Huffman blocks, each Huffman code decoded through one table indexed by the next
``max length`` bits of the stream (codes are stored bit-reversed, so each code fills every
slot that ends in its reversed bits). tests/test_html_browser.py checks it in Chromium
against Python's ``gzip`` at every compression level, stored blocks included.
"""

from __future__ import annotations

GUNZIP = """
function gunzip(src) {
  if (src[0] !== 0x1f || src[1] !== 0x8b || src[2] !== 8) throw new Error("not gzip data");
  const flags = src[3];
  let pos = 10;
  if (flags & 4) pos += 2 + (src[pos] | (src[pos + 1] << 8));  // FEXTRA
  if (flags & 8) while (src[pos++] !== 0);  // FNAME
  if (flags & 16) while (src[pos++] !== 0);  // FCOMMENT
  if (flags & 2) pos += 2;  // FHCRC
  const n = src.length;
  const out = new Uint8Array((src[n - 4] | (src[n - 3] << 8) | (src[n - 2] << 16)
                              | (src[n - 1] << 24)) >>> 0);
  let buf = 0, cnt = 0, op = 0;
  const need = (k) => { while (cnt < k) { buf |= (src[pos++] | 0) << cnt; cnt += 8; } };
  const bits = (k) => { need(k); const v = buf & ((1 << k) - 1); buf >>>= k; cnt -= k; return v; };
  const table = (lengths) => {
    let max = 0;
    const count = new Uint16Array(16), next = new Uint16Array(16);
    for (const l of lengths) { count[l]++; if (l > max) max = l; }
    count[0] = 0;
    for (let l = 1, code = 0; l < 16; l++) { code = (code + count[l - 1]) << 1; next[l] = code; }
    const size = 1 << max, slots = new Uint32Array(size);
    lengths.forEach((l, sym) => {
      if (!l) return;
      let c = next[l]++, r = 0;
      for (let i = 0; i < l; i++) { r = (r << 1) | (c & 1); c >>= 1; }
      for (let i = r; i < size; i += 1 << l) slots[i] = (sym << 4) | l;
    });
    return {slots, mask: size - 1, max};
  };
  const decode = (t) => {
    need(t.max);
    const e = t.slots[buf & t.mask], l = e & 15;
    if (!l) throw new Error("bad Huffman code");
    buf >>>= l; cnt -= l;
    return e >>> 4;
  };
  const LBASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67,
                 83, 99, 115, 131, 163, 195, 227, 258];
  const LEXTRA = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5,
                  5, 5, 5, 0];
  const DBASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769,
                 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577];
  const DEXTRA = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10,
                  11, 11, 12, 12, 13, 13];
  const ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
  let fixed = null;
  for (let last = 0; !last;) {
    last = bits(1);
    const type = bits(2);
    if (type === 0) {  // stored: whole bytes from the next byte boundary
      pos -= cnt >> 3; buf = 0; cnt = 0;
      const len = src[pos] | (src[pos + 1] << 8);
      out.set(src.subarray(pos + 4, pos + 4 + len), op);
      pos += 4 + len; op += len;
      continue;
    }
    let lit, dist;
    if (type === 1) {
      if (!fixed) {
        const l = new Array(288).fill(8, 0, 144).fill(9, 144, 256).fill(7, 256, 280)
          .fill(8, 280, 288);
        fixed = [table(l), table(new Array(30).fill(5))];
      }
      [lit, dist] = fixed;
    } else if (type === 2) {
      const nlit = bits(5) + 257, ndist = bits(5) + 1, ncode = bits(4) + 4;
      const cl = new Array(19).fill(0);
      for (let i = 0; i < ncode; i++) cl[ORDER[i]] = bits(3);
      const codes = table(cl), lengths = [];
      while (lengths.length < nlit + ndist) {
        const sym = decode(codes);
        if (sym < 16) { lengths.push(sym); continue; }
        const [val, times] = sym === 16 ? [lengths[lengths.length - 1], 3 + bits(2)]
          : sym === 17 ? [0, 3 + bits(3)] : [0, 11 + bits(7)];
        for (let i = 0; i < times; i++) lengths.push(val);
      }
      lit = table(lengths.slice(0, nlit));
      dist = table(lengths.slice(nlit));
    } else {
      throw new Error("bad DEFLATE block type");
    }
    for (;;) {
      const sym = decode(lit);
      if (sym < 256) { out[op++] = sym; continue; }
      if (sym === 256) break;
      const len = LBASE[sym - 257] + bits(LEXTRA[sym - 257]);
      const d = decode(dist);
      let from = op - (DBASE[d] + bits(DEXTRA[d]));
      for (let i = 0; i < len; i++) out[op++] = out[from++];
    }
  }
  if (op !== out.length) throw new Error("gzip data cut short");
  return out;
}
"""
