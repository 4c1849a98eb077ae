// Runs `call`, which must throw std::invalid_argument whose message holds `expected`.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace weft::test_support {

template <class Call>
void expect_refused(Call call, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected a refusal naming '" << expected << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace weft::test_support
