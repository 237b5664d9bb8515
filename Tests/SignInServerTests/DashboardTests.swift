import Foundation
import HummingbirdTesting
@testable import SignInServer
import Testing

/// docs/grafana-dashboard.json and the metrics table of docs/operations.md (issue 29) against what siwa exports.
@Suite("Metrics documentation")
struct DashboardTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The metric names of the table in docs/operations.md.
    static func documented() throws -> Set<String> {
        let page = try String(contentsOf: root.appendingPathComponent("docs/operations.md"), encoding: .utf8)
        return Set(page.matches(of: /\n\| `(siwa_[a-z_]+)` \|/).map { String($0.1) })
    }

    @Test("the dashboard is JSON Grafana reads, and every metric it asks for is one siwa exports and documents")
    func dashboard() throws {
        let data = try Data(contentsOf: Self.root.appendingPathComponent("docs/grafana-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 8)
        let documented = try Self.documented()
        for panel in panels {
            let targets = try #require(panel["targets"] as? [[String: Any]])
            for target in targets {
                let expr = try #require(target["expr"] as? String)
                let names = expr.matches(of: /siwa_[a-z_]+/).map { String($0.0).replacingOccurrences(of: "_bucket", with: "") }
                #expect(!names.isEmpty, "\(panel["title"] ?? "")")
                for name in names { #expect(documented.contains(name), "\(name) in the dashboard is not in docs/operations.md") }
            }
        }
    }

    @Test("every metric siwa exports after a sign-in and a failed one is in the table of docs/operations.md")
    func everyMetricDocumented() async throws {
        let documented = try Self.documented()
        try await withServer { h in
            _ = try await h.signIn()
            _ = try await h.post("/auth/apple/callback", form: "state=nobody&code=c&id_token=t")
            let metrics = try await h.get("/metrics").text
            let exported = Set(metrics.split(separator: "\n").filter { $0.hasPrefix("# TYPE siwa_") }.map { String($0.split(separator: " ")[2]) })
            #expect(exported.count >= 8)
            #expect(exported.subtracting(documented).isEmpty, "undocumented: \(exported.subtracting(documented).sorted())")
        }
    }
}
