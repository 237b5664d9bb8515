import Foundation
@testable import SignInServer
import Testing
import TestSupport
import X509

/// ACME Renewal Information (RFC 9773) as siwa reads it: the certificate's identifier, the window, when to ask again,
/// and the order that names the certificate it replaces. The exchange with a CA is `EdgeTests.renewalInformation`.
@Suite("The CA's renewal information (RFC 9773)")
struct RenewalInfoTests {
    @Test("the certificate identifier is RFC 9773's: its example, and a serial whose first bit is set keeps its leading zero")
    func certID() throws {
        // RFC 9773 4.1's example: keyIdentifier 69:88:5B:6B:87:46:40:41:E1:B3:7B:84:7B:A0:AE:2C:DE:01:C8:D4, serial 0x0087654321.
        let keyID: [UInt8] = [0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0, 0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4]
        #expect(RenewalInfo.certID(authorityKeyID: keyID, serial: [0x00, 0x87, 0x65, 0x43, 0x21]) == "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        // The serial's bytes as swift-certificates keeps them (without the zero a DER INTEGER needs here), or with
        // more zeros than DER allows: the identifier is made of the DER content all the same.
        #expect(RenewalInfo.certID(authorityKeyID: keyID, serial: Certificate.SerialNumber(bytes: [0x87, 0x65, 0x43, 0x21]).bytes) == "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        #expect(RenewalInfo.certID(authorityKeyID: keyID, serial: [0x00, 0x00, 0x87, 0x65, 0x43, 0x21]) == "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        // A serial whose first bit is clear has no zero before it.
        #expect(RenewalInfo.certID(authorityKeyID: keyID, serial: [0x00, 0x12, 0x34]) == "aYhba4dGQEHhs3uEe6CuLN4ByNQ.EjQ")
    }

    @Test("windows: RFC 3339 times with or without fractions; a picked time always falls inside the window (generated windows)")
    func windows() {
        #expect(RenewalInfo.date("2025-01-02T04:00:00Z") == Date(timeIntervalSince1970: 1_735_790_400))
        #expect(RenewalInfo.date("2025-01-02T04:00:00.250Z") == Date(timeIntervalSince1970: 1_735_790_400.25))
        #expect(RenewalInfo.date("2025-01-02T05:00:00+01:00") == Date(timeIntervalSince1970: 1_735_790_400))
        for text in ["", "2025-01-02", "2025-01-02 04:00:00Z", "yesterday", "2025-13-02T04:00:00Z"] {
            #expect(RenewalInfo.date(text) == nil, "\(text)")
        }
        var random = SplitMix64(seed: 0x4152_4931)
        for _ in 0..<2_000 {
            let start = Date(timeIntervalSince1970: Double(random.next() % 4_000_000_000))
            let end = start + Double(random.next() % 10_000_000) + 1
            let info = RenewalInfo(start: start, end: end, explanationURL: nil, retryAfter: nil)
            let picked = info.pickedTime()
            #expect(picked >= start && picked < end)
        }
    }

    @Test("when to ask again: the server's Retry-After within a minute and a day, six hours without one")
    func nextAsk() {
        func info(_ retryAfter: Duration?) -> RenewalInfo {
            RenewalInfo(start: Date(), end: Date() + 60, explanationURL: nil, retryAfter: retryAfter)
        }
        #expect(info(nil).nextAsk == .seconds(6 * 3600))
        #expect(info(.seconds(5)).nextAsk == .seconds(60))
        #expect(info(.seconds(7200)).nextAsk == .seconds(7200))
        #expect(info(.seconds(7 * 24 * 3600)).nextAsk == .seconds(24 * 3600))
    }

    @Test("the order names the certificate it replaces (RFC 9773 5) when there is one, and only then")
    func replaces() throws {
        let named = ACMEClient.newOrderPayload(domains: ["a.example", "b.example"], replaces: "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        #expect(named["replaces"] as? String == "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE")
        #expect((named["identifiers"] as? [[String: String]])?.map { $0["value"] } == ["a.example", "b.example"])
        #expect(ACMEClient.newOrderPayload(domains: ["a.example"], replaces: nil)["replaces"] == nil)
    }
}
