import Foundation
@testable import SignInServer
import Testing
import TestSupport

/// A CA's `Retry-After` (RFC 8555 6.6, a rate limit's; RFC 9110 10.2.3) read in each of its forms, and the wait
/// after a failed order that honours it.
@Suite("ACME: Retry-After and the wait after a failed order")
struct ACMERetryAfterTests {
    static func formatted(_ date: Date, _ format: String) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = format
        return formatter.string(from: date)
    }

    @Test("delay-seconds: 2,000 generated values read as that many seconds (a year at most); blanks around them ignored")
    func seconds() {
        var random = SplitMix64(seed: 36)
        let year: Int64 = 366 * 24 * 3600
        for _ in 0..<2000 {
            let value = Int64.random(in: 0...(2 * year), using: &random)
            #expect(ACMEClient.retryAfter(" \(value) ") == .seconds(min(value, year)), "\(value)")
        }
        #expect(ACMEClient.retryAfter("99999999999999999999999") == .seconds(year))
        #expect(ACMEClient.retryAfter("0000000000000000120") == .seconds(120))
    }

    @Test("RFC 850's two-digit year is the one within 50 years of now")
    func twoDigitYears() throws {
        let gmt = try #require(TimeZone(identifier: "GMT"))
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = gmt
        for (now, text, year) in [(2026, "Thursday, 26-Nov-99 08:00:00 GMT", 1999), (2026, "Thursday, 26-Nov-26 08:00:00 GMT", 2026),
                                  (2026, "Thursday, 26-Nov-76 08:00:00 GMT", 2076), (2060, "Thursday, 26-Nov-05 08:00:00 GMT", 2105),
                                  (2060, "Thursday, 26-Nov-15 08:00:00 GMT", 2015)] {
            let at = try #require(calendar.date(from: DateComponents(year: now, month: 6, day: 1)))
            let parsed = HTTPDate.parse(text, now: at)
            #expect(parsed.map { calendar.component(.year, from: $0) } == year, "\(text) in \(now)")
        }
    }

    @Test("an HTTP date in each form a recipient must read (IMF-fixdate, RFC 850, asctime), 500 generated dates each: the time until it; a past date is now")
    func dates() {
        var random = SplitMix64(seed: 8555)
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        for _ in 0..<500 {
            let ahead = Int64.random(in: 1...(30 * 24 * 3600), using: &random)
            let date = now + TimeInterval(ahead)
            let forms = [
                Self.formatted(date, "EEE, dd MMM yyyy HH:mm:ss 'GMT'"),
                Self.formatted(date, "EEEE, dd-MMM-yy HH:mm:ss 'GMT'"),
                // asctime pads a one-digit day with a blank.
                Self.formatted(date, "EEE MMM") + " " + String(Self.formatted(date, "d")).leftPadded(to: 2) + " " + Self.formatted(date, "HH:mm:ss yyyy"),
            ]
            for form in forms {
                #expect(ACMEClient.retryAfter(form, now: now) == .seconds(ahead), "\(form)")
            }
        }
        #expect(ACMEClient.retryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now: now) == .zero)
        #expect(ACMEClient.retryAfter("Sun Nov  6 08:49:37 1994", now: now) == .zero)
    }

    @Test("what is neither is ignored: nothing, blanks, a sign, a fraction, words, a date without its zone, a date that is none, one form's parts in another")
    func neither() {
        let values: [String?] = [
            nil, "", "   ", "-5", "+5", "1.5", "1e3", "soon", "0x10", "٣٠", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 31 Nov 2027 08:49:37 GMT", "Sun, 29 Feb 2027 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT", "Sunday, 06 Nov 1994 08:49:37 GMT", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06 Now 1994 08:49:37 GMT", "Sun 06 Nov 1994 08:49:37 GMT", "Sun, 06-Nov-94 08:49:37 GMT", "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37", "Sun Nov 06 08:49:37 94", "Sun Nov 123 08:49:37 1994", "Sunday Nov  6 08:49:37 1994",
        ]
        for value in values {
            #expect(ACMEClient.retryAfter(value) == nil, "\(value ?? "nil")")
        }
    }

    @Test("after a failed order: the backoff and up to a tenth more; a CA's longer Retry-After instead, never a shorter one, at most a week and a quarter of a served certificate's remaining life")
    func waitAfterFailure() {
        struct Unreachable: Error {}
        let backoff = Duration.seconds(60)
        let rateLimited = ACMEClient.Failure(
            step: "newOrder", detail: "429 rateLimited: too many certificates", problemType: "urn:ietf:params:acme:error:rateLimited", retryAfter: .seconds(7200)
        )
        #expect(rateLimited.rateLimited)
        #expect(EdgeCertificateService.retryDelay(after: rateLimited, backoff: backoff) == .seconds(7200))
        // A week at most, and no more than a quarter of a served certificate's remaining life.
        let month = ACMEClient.Failure(step: "newAccount", detail: "503", retryAfter: .seconds(30 * 86_400))
        #expect(EdgeCertificateService.retryDelay(after: month, backoff: backoff) == .seconds(7 * 86_400))
        #expect(EdgeCertificateService.retryDelay(after: month, backoff: backoff, remaining: 20 * 86_400) == .seconds(5 * 86_400))
        #expect(EdgeCertificateService.retryDelay(after: rateLimited, backoff: backoff, remaining: 4_000) == .seconds(1_000))
        let lapsing = EdgeCertificateService.retryDelay(after: rateLimited, backoff: backoff, remaining: -10)
        #expect(lapsing >= backoff && lapsing <= backoff + .seconds(6), "\(lapsing)")
        let soon = ACMEClient.Failure(step: "newOrder", detail: "503", retryAfter: .seconds(5))
        for error in [soon, ACMEClient.Failure(step: "directory", detail: "unreachable"), Unreachable()] as [any Error] {
            for _ in 0..<50 {
                let delay = EdgeCertificateService.retryDelay(after: error, backoff: backoff)
                #expect(delay >= backoff && delay <= backoff + .seconds(6), "\(error): \(delay)")
            }
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: " ", count: max(0, width - count)) + self
    }
}
