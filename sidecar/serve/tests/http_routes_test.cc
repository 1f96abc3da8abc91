// The HTTP route table and query parameters.
#include "trainscope/sidecar/http_routes.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

TEST(HttpRoutes, ExactThenLongestPrefixElse404) {
  HttpRoutes routes;
  routes.Exact("/a", [](const HttpServer::Request&) { return HttpServer::Response{200, "", "a"}; });
  routes.Prefix("/p/", [](const HttpServer::Request&) {
    return HttpServer::Response{200, "", "p"};
  });
  routes.Prefix("/p/q/", [](const HttpServer::Request&) {
    return HttpServer::Response{200, "", "pq"};
  });
  EXPECT_EQ(routes.Serve({"/a", ""}).body, "a");
  EXPECT_EQ(routes.Serve({"/p/x", ""}).body, "p");
  EXPECT_EQ(routes.Serve({"/p/q/x", ""}).body, "pq");
  HttpServer::Response missing = routes.Serve({"/nope", ""});
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("/a"), std::string::npos);
}

TEST(HttpRoutes, QueryParameters) {
  EXPECT_EQ(QueryParam("local=1&task=ps%3A0", "task"), "ps:0");
  EXPECT_EQ(QueryParam("local=1&task=ps%3A0", "local"), "1");
  EXPECT_EQ(QueryParam("a=x+y&b", "a"), "x y");
  EXPECT_EQ(QueryParam("a=1", "b"), "");
  EXPECT_EQ(QueryParam("a=%zz%4", "a"), "%zz%4");
  EXPECT_EQ(QueryParam("a=" + std::string(2000, 'x'), "a").size(), 512u);
  EXPECT_EQ(QueryParam("task=worker%3A0&task=ps:0", "task"), "worker:0");  // The first wins.
  EXPECT_EQ(QueryParam("", "a"), "");
  EXPECT_EQ(QueryParam("&&=&a=", "a"), "");
  EXPECT_EQ(QueryParam("a", "a"), "");
  EXPECT_EQ(QueryParam("x%20y=1", "x y"), "1");
  EXPECT_EQ(QueryParam("a=%E2%9C%93", "a"), "\xE2\x9C\x93");
}

}  // namespace
}  // namespace trainscope::sidecar
