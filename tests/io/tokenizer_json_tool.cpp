// meshtrain's side of tests/io/test_tokenizer_json.py: io::Tokenizer (the same load as prepare's and
// sample's) on a tokenizer.json and a list of texts.
//
//   test_tokenizer_json_tool TOKENIZER TEXTS_JSON
//
// Prints {"ids": [...], "document": [...], "decoded": [...]}: each text's encode, encode_document and
// decode(encode). An InputError is printed on stderr with exit 2, as the commands do.
#include "core/errors.hpp"
#include "io/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: test_tokenizer_json_tool TOKENIZER TEXTS_JSON\n";
    return 1;
  }
  try {
    const auto tokenizer = meshtrain::io::Tokenizer::load(argv[1]);
    std::ifstream in(argv[2]);
    std::stringstream buffer;
    buffer << in.rdbuf();
    nlohmann::json result = {
        {"ids", nlohmann::json::array()}, {"document", nlohmann::json::array()}, {"decoded", nlohmann::json::array()}};
    for (const auto& text : nlohmann::json::parse(buffer.str())) {
      const std::string s = text.get<std::string>();
      const std::vector<int> ids = tokenizer.encode(s);
      result["ids"].push_back(ids);
      result["document"].push_back(tokenizer.encode_document(s));
      result["decoded"].push_back(tokenizer.decode(ids));
    }
    std::cout << result.dump();
  } catch (const meshtrain::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
