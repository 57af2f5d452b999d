// The tokenizer the page needs from @sctg/sentencepiece-js: Google's sentencepiece compiled to
// WebAssembly, so the page splits text exactly as the Python package does.
export { SentencePieceProcessor } from "@sctg/sentencepiece-js";
