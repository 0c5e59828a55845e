// osdp::Error hierarchy: thrown for user and input errors that stop the operation.
// Expected outcomes (a plan that does not fit) are results, never exceptions; programmer
// errors are assertions.
#pragma once

#include <stdexcept>
#include <string>

namespace osdp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input in a file or string: names the file, the JSON pointer and what was expected.
class InputError : public Error {
 public:
  InputError(std::string file, std::string pointer, const std::string& what_expected)
      : Error(compose(file, pointer, what_expected)), file_(std::move(file)), pointer_(std::move(pointer)) {}
  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }

 private:
  static std::string compose(const std::string& file, const std::string& pointer, const std::string& msg) {
    std::string where = file.empty() ? std::string("<input>") : file;
    if (!pointer.empty()) where += ":" + pointer;
    return where + ": " + msg;
  }
  std::string file_;
  std::string pointer_;
};

// Bad command-line usage or an inconsistent request.
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace osdp
