// json_schema.h: OpenAI's response_format as GBNF (grammar.h). json_object: any JSON
// object. json_schema: the documents the schema accepts, or a subset of them, so the
// output always validates: objects carry only the listed properties, in the schema's
// order (required ones always, optional ones or not); whitespace between tokens is at most
// one newline and 20 indentation characters; numbers have at most 16 digits a part (and 2 of exponent: every one fits a double).
// Supported: type (and lists of types), enum, const, properties, required,
// additionalProperties (extra properties are never written), items, prefixItems,
// minItems, maxItems, minLength, maxLength, format date / time / date-time / uuid,
// anyOf, oneOf (as anyOf: a document matching two branches fails oneOf), allOf of one
// schema, $ref into #/$defs or #/definitions (recursion included), and integer minimum 0
// or 1. Any other validation keyword (pattern, maximum, uniqueItems, not, ...) is refused
// with an error naming it and where it is (refusing beats output that does not validate);
// annotations (title, description, default, examples, ...) are ignored.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace grammar {

// GBNF accepting any JSON object (json_object mode).
std::string json_object_gbnf();
// GBNF accepting documents valid under `schema`; the error names the JSON pointer.
util::Expected<std::string> json_schema_gbnf(const nlohmann::ordered_json& schema);  // properties in order
// The same document between fixed text: prefix DOCUMENT suffix (a forced tool call's markers).
util::Expected<std::string> json_schema_gbnf(const nlohmann::ordered_json& schema, const std::string& prefix,
                                             const std::string& suffix);
// 1 to max_docs documents: prefix DOCUMENT (separator DOCUMENT)* suffix (parallel tool calls).
util::Expected<std::string> json_schema_gbnf(const nlohmann::ordered_json& schema, const std::string& prefix,
                                             const std::string& separator, const std::string& suffix, int max_docs);
// One of several documents, each after its own text: prefix (lead_0 middle_0 DOC_0 | lead_1
// ...) (harmony's " to=functions." NAME header ARGUMENTS). middle: a GBNF expression (may
// be empty) written between the lead and the document; it may use the base rules (ws, ...).
struct SchemaBranch {
  std::string lead;
  std::string middle;
  nlohmann::ordered_json schema;
};
util::Expected<std::string> json_schema_choice_gbnf(const std::string& prefix, const std::vector<SchemaBranch>& branches);

}  // namespace grammar
