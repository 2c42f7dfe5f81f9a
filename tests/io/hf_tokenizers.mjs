// The independent peer of tests/io/test_tokenizer_json.py: Hugging Face's own JavaScript tokenizers
// (@huggingface/tokenizers from npm, installed by share/scripts/setup.sh) on a tokenizer.json.
//
//   node hf_tokenizers.mjs NODE_MODULES TOKENIZER_JSON TEXTS_JSON
//
// TEXTS_JSON holds an array of strings; prints {"ids": [...], "document": [...], "decoded": [...]}: each text's ids
// without and with the post-processor's special tokens, and the text of its ids.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const [modules, tokenizerPath, textsPath] = process.argv.slice(2);
const entry = path.join(modules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);

const tokenizer = new Tokenizer(JSON.parse(readFileSync(tokenizerPath, "utf8")), {});
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const result = { ids: [], document: [], decoded: [] };
for (const text of texts) {
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
  result.ids.push(ids);
  result.document.push(tokenizer.encode(text).ids);
  result.decoded.push(tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }));
}
process.stdout.write(JSON.stringify(result));
