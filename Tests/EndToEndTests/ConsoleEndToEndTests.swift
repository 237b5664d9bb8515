import AppleIDEmulator
import Foundation
import TestSupport
import Testing

extension BrowserSignInTests {
    /// The operator's console (issue 28, part B) with real parts, and every page a person meets looked at as issue 29
    /// asks: a siwa with `admin_groups`, nginx in front of an app with the documentation's `auth_request` block, and
    /// two Chromiums (the suite's, in English, and one in Simplified Chinese). Each test has a siwa of its own, so no
    /// other test's people, sessions or audit events are in it.
    @Suite("The operator's console and the pages at 375 and 1280 px, with real parts")
    struct ConsoleEndToEndTests {
        /// Members of `ops` operate the console; `/private/` is for `finance` alone, so anyone else signed in meets
        /// the 403 page there (the denied page, from `/auth/forward`).
        static let settings: [String: String?] = [
            "admin_groups": "ops",
            "groups": #"{"ops": ["ada@example.com"], "finance": ["grace@example.org"]}"#,
            "access_rules": #"[{"paths": ["^/private/"], "policy": "allow", "groups": ["finance"]}]"#,
            "oidc_clients": #"[{"client_id": "grafana", "client_secret": "grafana-secret-for-the-console-test", "redirect_uris": ["https://grafana.example.com/login/generic_oauth"]}]"#,
        ]

        @Test("Ada, an operator, finds Li Lei by email in the console, opens her page and ends all her sessions: Li Lei's next request through nginx goes to the sign-in; signed in again, she gets the 403 page at /auth/admin with no hint of the console; the audit trail names Ada")
        func operatorEndsAllSessions() async throws {
            let e2e = try EndToEnd.current()
            let operatorBrowser = e2e.browser
            try await e2e.startClean()
            try await withEchoUpstream { app in
                try await LocalSite.run(settings: Self.settings) { site in
                    let block = try NginxFrontTests.readmeBlock(siwa: site.port, app: app)
                    try await withNginx(configuration: { port in NginxFrontTests.server(port: port, block) }) { nginx in
                        try await e2e.sessions.with(language: "zh-CN") { person in
                            try await Self.operatorEndsAllSessions(site: site, nginx: nginx, operator: operatorBrowser, person: person)
                        }
                    }
                }
            }
            try await e2e.startClean()
        }

        /// Li Lei (in Chinese) through nginx, Ada (in English) in the console: the steps of the test of that name.
        private static func operatorEndsAllSessions(site: LocalSite, nginx: RunningProxy, operator ada: Browser, person lilei: Browser) async throws {
            let adaUser = site.user("Ada")
            let lileiUser = site.user("李")
            let notes = nginx.url("/notes")

            // Li Lei reaches the app through nginx.
            try await lilei.open(notes)
            try await consent(lilei, on: site, as: lileiUser)
            try await lilei.waitForPage(notes)
            #expect(try await echoed(lilei).values("x-auth-request-user") == [lileiUser.sub])

            // Ada, signed out, is sent to sign in on the way to the console and comes back to it.
            try await ada.open(site.url("/auth/admin"))
            try await consent(ada, on: site, as: adaUser)
            try await ada.waitForPage(site.url("/auth/admin"))
            #expect(try await ada.element("h1").text() == "Console")

            // She finds Li Lei by her email, with the console's search form (a plain GET form).
            try await ada.element("#q").type(lileiUser.email)
            try await ada.element("form.search button[type=submit]").click()
            try await waitForAnswer(ada, containing: "q=lilei%40example.cn")
            let found = try await ada.elements("#people li a")
            try #require(found.count == 1, "people found: \(found.count)")
            #expect(try await found[0].text().contains(lileiUser.email))
            try await found[0].click()
            try await ada.waitForPage(site.url("/auth/admin/person"))
            #expect(try await ada.element("#person").text().contains(lileiUser.email))
            #expect(try await ada.elements("#sessions li").count == 1, "Li Lei's one session, through nginx")
            #expect(try await ada.element("#end-all").text() == "End all sessions")

            try await ada.element("#end-all").click()
            try await ada.waitUntil("Li Lei's page without sessions") {
                let shown = try await ada.currentURL()
                let sessions = try await ada.elements("#sessions li").count + ada.elements("#end-all").count
                return shown.hasPrefix(site.url("/auth/admin/person?")) && sessions == 0
            }

            // Li Lei's next request through nginx: no app, but siwa's sign-in, on to Apple's consent page.
            try await lilei.open(notes)
            try await lilei.waitForPage(site.emulatorOrigin + "/auth/authorize")
            let authorize = URLComponents(string: try await lilei.currentURL())
            #expect(authorize?.queryItems?.first { $0.name == "redirect_uri" }?.value == site.url("/auth/apple/callback"), "\(authorize?.string ?? "?")")
            // Signed in again, she is back on the page she asked for: siwa kept it (rd) on the way.
            try await consent(lilei, on: site, as: lileiUser)
            try await lilei.waitForPage(notes)
            #expect(try await echoed(lilei).values("x-auth-request-user") == [lileiUser.sub])

            // She is no operator: 403, a page that says nothing of what is there.
            for path in ["/auth/admin", "/auth/admin/audit"] {
                try await lilei.open(site.url(path))
                try await lilei.waitForPage(site.url(path))
                #expect(try await navigationStatus(lilei) == 403, "\(path)")
                #expect(try await lilei.element("#error-title").text() == "此地址不开放", "\(path)")
                let page = try await lilei.execute("return document.documentElement.outerHTML").string ?? ""
                for hint in ["/auth/admin", "csrf_token", "控制台", "Console", "console", "审计", "audit"] {
                    #expect(!page.contains(hint), "the 403 page at \(path) says \(hint.debugDescription)")
                }
            }

            // The audit trail, filtered with its form: the operator's act, naming her.
            try await ada.open(site.url("/auth/admin/audit"))
            try await ada.element("#event").type("sessions-ended")
            try await ada.element("form.search button[type=submit]").click()
            try await waitForAnswer(ada, containing: "event=sessions-ended")
            let rows = try await auditRows(ada)
            try #require(rows.count == 1, "audit rows: \(rows)")
            #expect(rows[0].count == 4 && rows[0][1] == "sessions-ended", "\(rows[0])")
            #expect(rows[0][2].contains(lileiUser.sub) && rows[0][2].contains("by \(adaUser.email)"), "who: \(rows[0])")
            #expect(rows[0][3].contains("all 1 sessions, by an operator"), "what: \(rows[0])")
        }

        @Test("a person's pages (sign-in, session, sessions, and the 403 page of a rule through nginx), in English and Chinese at 375 and 1280 px: screenshots; nothing to scroll sideways or cut off, nothing to press touching another or a line of text, no word broken that fits on a line, no label parted from its field; the session page's Sign out button and Delete my account link at least 8 px apart")
        func personPagesAtTwoWidths() async throws {
            let e2e = try EndToEnd.current()
            try await e2e.startClean()
            try await withEchoUpstream { app in
                try await LocalSite.run(settings: Self.settings) { site in
                    let block = try NginxFrontTests.readmeBlock(siwa: site.port, app: app)
                    try await withNginx(configuration: { port in NginxFrontTests.server(port: port, block) }) { nginx in
                        try await e2e.sessions.with(language: "zh-CN") { chinese in
                            for (browser, language) in [(e2e.browser, "en"), (chinese, "zh-Hans")] {
                                try await Self.personPages(site: site, nginx: nginx, browser: browser, language: language)
                            }
                        }
                    }
                }
            }
            try await e2e.startClean()
        }

        /// The sign-in, session, sessions and denied pages as Ada sees them in `browser`, looked at and screenshot.
        private static func personPages(site: LocalSite, nginx: RunningProxy, browser: Browser, language: String) async throws {
            let ada = site.user("Ada")
            try await browser.open(site.url("/"))
            #expect(try await browser.element("h1").text() == (language == "en" ? "Sign in" : "登录"))
            try await look(browser, "signin-\(language)", language: language)

            try await browser.element("#siwa-button").click()
            try await consent(browser, on: site, as: ada)
            try await browser.waitForPage(site.url("/session"))
            try await browser.open(site.url("/auth/session"))
            #expect(try await browser.element("h1").text() == (language == "en" ? "You are signed in" : "你已登录"))
            for width in Self.widths {
                try await browser.emulate(width)
                let apart = try await gap(browser, between: "#sign-out", and: "#delete-link")
                #expect(
                    apart.gap >= 8,
                    "session page, \(width.pixels) px, \(language): the Sign out button and the Delete my account link are \(apart.gap) px apart (at least 8 wanted): \(apart.rects)"
                )
            }
            try await look(browser, "session-\(language)", language: language)

            try await browser.open(site.url("/auth/sessions"))
            #expect(try await browser.elements("#sessions li.session").count >= 1)
            try await look(browser, "sessions-\(language)", language: language)

            // A rule closes /private/ to everyone outside finance: nginx shows siwa's 403 page, naming Ada.
            try await browser.open(nginx.url("/private/report"))
            try await browser.waitForPage(nginx.url("/private/report"))
            #expect(try await navigationStatus(browser) == 403)
            #expect(try await browser.element("h1").text() == (language == "en" ? "You do not have access" : "你没有访问权限"))
            #expect(try await browser.element("#who").text().contains(ada.email))
            try await look(browser, "denied-\(language)", language: language)
        }

        @Test("the console's pages (people, a person with sessions, groups, OpenID clients with a secret shown once, audit), in English and Chinese at 375 and 1280 px: screenshots; nothing to scroll sideways or cut off, nothing to press touching another or a line of text, no word broken that fits on a line, no label parted from its field; a session's row says how it came in words")
        func consolePagesAtTwoWidths() async throws {
            let e2e = try EndToEnd.current()
            try await e2e.startClean()
            try await LocalSite.run(settings: Self.settings) { site in
                // Li Lei signed in on two devices, so her page lists two sessions, each with its button.
                let lilei = site.user("李")
                try await Visit.withClient { visit in
                    for _ in 0..<2 { _ = try await visit.signIn(site, user: lilei) }
                }
                try await e2e.sessions.with(language: "zh-CN") { chinese in
                    let both = [(e2e.browser, "en"), (chinese, "zh-Hans")]
                    for (browser, _) in both {
                        try await browser.open(site.url("/auth/admin"))
                        try await Self.consent(browser, on: site, as: site.user("Ada"))
                        try await browser.waitForPage(site.url("/auth/admin"))
                    }
                    // Changes made in English, so the lists have something to remove in both languages.
                    let english = e2e.browser
                    try await english.open(site.url("/auth/admin/groups"))
                    try await english.element("#group").type("staff")
                    try await english.element("#member").type("@example.cn")
                    try await english.element("#add-member button[type=submit]").click()
                    try await english.waitUntil("staff among the groups") {
                        try await english.element("#group-list").text().contains("@example.cn")
                    }
                    try await english.open(site.url("/auth/admin/clients"))
                    try await english.element("#client_id").type("wiki")
                    try await english.element("#redirect_uri").type("https://wiki.example.com/oauth2/callback")
                    try await english.element("#backchannel_logout_uri").type("https://wiki.example.com/oauth2/backchannel-logout")
                    try await english.element("#add-client button[type=submit]").click()
                    _ = try await english.element("#secret")
                    try await Self.look(english, "console-client-secret-en", language: "en")

                    for (browser, language) in both {
                        try await Self.consolePages(site: site, browser: browser, language: language, person: lilei)
                    }
                }
            }
            try await e2e.startClean()
        }

        /// The console's people, person, groups, clients and audit pages as Ada sees them in `browser`, looked at
        /// and screenshot.
        private static func consolePages(site: LocalSite, browser: Browser, language: String, person: EmulatorConfiguration.User) async throws {
            let heading = language == "en" ? "Console" : "控制台"
            try await browser.open(site.url("/auth/admin"))
            #expect(try await browser.element("h1").text() == heading)
            #expect(try await browser.elements("#people li").count == 2, "Ada and Li Lei")
            try await look(browser, "console-people-\(language)", language: language)

            try await browser.open(site.url("/auth/admin/person?sub=") + Visit.formEncode(person.sub))
            let sessions = try await browser.elements("#sessions li")
            #expect(sessions.count == 2)
            // How each came, in words, as the person's own sessions page says it.
            let via = language == "en" ? "the sign-in page" : "登录页面"
            for session in sessions {
                let row = try await session.text()
                #expect(row.contains(via), "console-person-\(language): a session row says \(row.debugDescription), not \(via.debugDescription)")
            }
            try await look(browser, "console-person-\(language)", language: language)

            try await browser.open(site.url("/auth/admin/groups"))
            #expect(try await browser.element("#group-list").text().contains("@example.cn"))
            try await look(browser, "console-groups-\(language)", language: language)

            try await browser.open(site.url("/auth/admin/clients"))
            #expect(try await browser.element("#client-list").text().contains("wiki"))
            #expect(try await browser.elements("#secret").isEmpty, "the secret is shown once")
            try await look(browser, "console-clients-\(language)", language: language)

            try await browser.open(site.url("/auth/admin/audit"))
            #expect(try await browser.elements("#events tbody tr").count >= 4, "sign-ins, the group and the client added")
            try await look(browser, "console-audit-\(language)", language: language)
        }

        // MARK: steps

        /// Answers Apple's (the emulator's) consent page as `user`, once the browser is there.
        private static func consent(_ browser: Browser, on site: LocalSite, as user: EmulatorConfiguration.User) async throws {
            try await AccessRulesEndToEndInChromium.consent(browser, on: site, as: user)
        }

        /// Waits for the answer to a form sent with GET: the address shows `query`, and the page is loaded.
        private static func waitForAnswer(_ browser: Browser, containing query: String) async throws {
            try await browser.waitUntil("a page at an address with \(query)") {
                guard try await browser.currentURL().contains(query) else { return false }
                return try await browser.execute("return document.readyState").string == "complete"
            }
        }

        /// What the echo upstream received, as the browser shows its answer.
        private static func echoed(_ browser: Browser) async throws -> EchoedRequest {
            try await AccessRulesEndToEndInChromium.echoed(browser)
        }

        /// The HTTP status of the page the browser shows (Navigation Timing's `responseStatus`).
        private static func navigationStatus(_ browser: Browser) async throws -> Int? {
            try await browser.execute("return performance.getEntriesByType('navigation')[0].responseStatus").number.map { Int($0) }
        }

        /// The cells of the audit page's rows, as the browser shows them.
        private static func auditRows(_ browser: Browser) async throws -> [[String]] {
            let rows = try await browser.execute("""
                return Array.from(document.querySelectorAll('#events tbody tr')).map(function (tr) {
                    return Array.from(tr.cells).map(function (td) { return td.textContent.trim(); });
                });
                """)
            return (rows.array ?? []).map { ($0.array ?? []).map { $0.string ?? "" } }
        }

        // MARK: looking at a page

        /// A screen a page is looked at on.
        struct Width: Sendable {
            var pixels: Int
            var height: Int
            var mobile: Bool
        }

        /// A phone's (375 px, as an iPhone's) and a desktop's.
        static let widths = [Width(pixels: 375, height: 812, mobile: true), Width(pixels: 1280, height: 900, mobile: false)]

        /// How far apart two things to press must be at least, in CSS px: closer, they read as one, and a finger meant
        /// for one lands on the other.
        static let apart = 4.0

        /// Looks at the page shown as a person would at each of `widths`: the page is in `language`, fits the screen
        /// (nothing to scroll sideways), and shows none of what `layoutScript` finds wrong, each an issue naming the
        /// page, the width and the boxes concerned; saves a screenshot of the whole page as `<name>-<width>.png`.
        private static func look(_ browser: Browser, _ name: String, language: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            #expect(try await browser.execute("return document.documentElement.lang").string == language, "\(name)", sourceLocation: sourceLocation)
            for width in widths {
                try await browser.emulate(width)
                let seen = try await browser.execute(Self.layoutScript, [.number(apart)])
                let place = "\(name) at \(width.pixels) px (\(seen["url"]?.string ?? "?"))"
                let (inner, scroll, client) = (seen["innerWidth"]?.number ?? 0, seen["scrollWidth"]?.number ?? 0, seen["clientWidth"]?.number ?? 0)
                #expect(inner == Double(width.pixels), "\(place): the viewport is \(inner) px wide", sourceLocation: sourceLocation)
                #expect(scroll <= client, "\(place): the page is \(scroll) px wide, \(client) px show: it scrolls sideways; widest: \(seen["widest"]?.string ?? "?")", sourceLocation: sourceLocation)
                for problem in seen["problems"]?.array ?? [] {
                    Issue.record("\(place): \(problem.string ?? "?")", sourceLocation: sourceLocation)
                }
                // The whole page in one picture: the screen as tall as the page.
                let tall = min(max(width.height, Int(seen["scrollHeight"]?.number ?? 0)), 8000)
                try await browser.emulate(Width(pixels: width.pixels, height: tall, mobile: width.mobile))
                let file = try await Artifacts.screenshot(browser, named: "\(name)-\(width.pixels)")
                let png = FileManager.default.contents(atPath: file.path) ?? Data()
                // IHDR's width, big-endian, at bytes 16–19.
                let pixels = png.count >= 24 ? png[16..<20].reduce(0) { $0 << 8 | Int($1) } : 0
                #expect(Array(png.prefix(8)) == Artifacts.pngSignature && pixels == width.pixels, "\(file.path): \(pixels) px wide", sourceLocation: sourceLocation)
            }
            try await browser.clearEmulation()
        }

        /// The distance between the nearest boxes of the elements `first` and `second` select (negative when they
        /// overlap), with their rects.
        private static func gap(_ browser: Browser, between first: String, and second: String) async throws -> (gap: Double, rects: String) {
            let found = try await browser.execute(
                Self.geometry + """
                    var a = document.querySelector(arguments[0]), b = document.querySelector(arguments[1]);
                    if (!a || !b) { return {gap: -1000, rects: 'missing: ' + (a ? arguments[1] : arguments[0])}; }
                    var nearest = closest(a, b);
                    return {gap: nearest.gap, rects: JSON.stringify(nearest.rects)};
                    """,
                [.string(first), .string(second)]
            )
            return (found["gap"]?.number ?? -1000, found["rects"]?.string ?? "?")
        }

        /// Functions the layout scripts share: `gapOf(x, y)` is the distance between two rects (negative when they
        /// overlap), `closest(a, b)` the least between the boxes of elements `a` and `b` (each line of a wrapped link
        /// its own box) with those boxes in page coordinates (`page`).
        private static let geometry = """
            function page(r) {
                return [Math.round(r.left + scrollX), Math.round(r.top + scrollY), Math.round(r.right + scrollX), Math.round(r.bottom + scrollY)];
            }
            function gapOf(x, y) { return Math.max(y.left - x.right, x.left - y.right, y.top - x.bottom, x.top - y.bottom); }
            function closest(a, b) {
                var best = {gap: Infinity, rects: null};
                Array.from(a.getClientRects()).forEach(function (x) {
                    Array.from(b.getClientRects()).forEach(function (y) {
                        var gap = gapOf(x, y);
                        if (gap < best.gap) { best = {gap: Math.round(gap * 10) / 10, rects: [page(x), page(y)]}; }
                    });
                });
                return best;
            }

            """

        /// The page's widths and height, the element that reaches furthest right, and what a person would see wrong
        /// on it, each said in words with the boxes concerned (left, top, right, bottom, in page px):
        /// - two visible things to press (links, buttons, fields) closer than `arguments[0]` px, or overlapping;
        /// - a button or field on a line of text (its box over the letters of the line above or below);
        /// - a word broken across two lines though it fits on one (`word-break: break-all` splitting "UTC");
        ///   words with Chinese characters are left out, as Chinese breaks between any two characters;
        /// - a label at the end of a line whose field starts the next line, under something else;
        /// - a box that cuts off its content or scrolls it sideways inside itself.
        private static let layoutScript = geometry + """
            var minimum = arguments[0], problems = [];
            function name(el) {
                var text = (el.textContent || el.value || el.getAttribute('name') || '').replace(/\\s+/g, ' ').trim().slice(0, 40);
                return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + String(el.className).trim().split(/\\s+/).join('.') : '') + ' "' + text + '"';
            }
            function visible(el) {
                var r = el.getBoundingClientRect();
                return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden';
            }
            var pressable = Array.from(document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea, summary')).filter(visible);
            for (var i = 0; i < pressable.length; i++) {
                for (var j = i + 1; j < pressable.length; j++) {
                    var a = pressable[i], b = pressable[j];
                    if (a.contains(b) || b.contains(a)) { continue; }
                    var nearest = closest(a, b);
                    if (nearest.gap < minimum) {
                        problems.push(name(a) + ' and ' + name(b) + ' are ' + nearest.gap + ' px apart (at least ' + minimum + ' wanted): ' + JSON.stringify(nearest.rects));
                    }
                }
            }
            // Every line of text on the page, with the element it is in.
            var lines = [], words = [];
            var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
            for (var node = walker.nextNode(); node; node = walker.nextNode()) {
                if (!node.data.trim() || !visible(node.parentElement)) { continue; }
                var range = document.createRange();
                range.selectNodeContents(node);
                Array.from(range.getClientRects()).forEach(function (r) { if (r.width > 0) { lines.push({node: node, rect: r}); } });
                var pattern = /[^\\s-]+/g, match;
                while ((match = pattern.exec(node.data)) !== null) {
                    if (/[\\u2e80-\\u9fff\\uf900-\\ufaff\\uff00-\\uffef]/.test(match[0])) { continue; }
                    var word = document.createRange();
                    word.setStart(node, match.index);
                    word.setEnd(node, match.index + match[0].length);
                    words.push({node: node, text: match[0], rects: Array.from(word.getClientRects()).filter(function (r) { return r.width > 0; })});
                }
            }
            // A button's or field's box on a line of text outside it (its own label's text aside).
            pressable.filter(function (el) { return el.matches('button, input, select, textarea'); }).forEach(function (el) {
                var box = el.getBoundingClientRect();
                var labels = Array.from(el.labels || []);
                lines.forEach(function (line) {
                    if (el.contains(line.node) || labels.some(function (label) { return label.contains(line.node); })) { return; }
                    var gap = Math.round(gapOf(box, line.rect) * 10) / 10;
                    if (gap < minimum) {
                        problems.push(name(el) + ' is ' + gap + ' px from the text "' + line.node.data.trim().slice(0, 40) + '" (at least ' + minimum + ' wanted): ' + JSON.stringify([page(box), page(line.rect)]));
                    }
                });
            });
            // A word split over two lines that would fit on one of them.
            words.forEach(function (word) {
                var tops = word.rects.map(function (r) { return Math.round(r.top); }).filter(function (t, k, all) { return all.indexOf(t) === k; });
                if (tops.length < 2) { return; }
                var block = word.node.parentElement;
                while (block.parentElement && getComputedStyle(block).display.indexOf('inline') === 0) { block = block.parentElement; }
                var style = getComputedStyle(block);
                var room = block.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
                var width = word.rects.reduce(function (sum, r) { return sum + r.width; }, 0);
                if (width <= room) {
                    problems.push('the word "' + word.text + '" is broken over ' + tops.length + ' lines though it fits on one (' + Math.round(width) + ' px wide, the line ' + Math.round(room) + ' px), in ' + name(block) + ': ' + JSON.stringify(word.rects.map(page)));
                }
            });
            // A label ending a line, its field starting the next one elsewhere.
            Array.from(document.querySelectorAll('label[for]')).filter(visible).forEach(function (label) {
                var field = document.getElementById(label.htmlFor);
                if (!field || !visible(field)) { return; }
                var l = label.getBoundingClientRect(), f = field.getBoundingClientRect();
                var sameLine = f.top < l.bottom && l.top < f.bottom;
                var underIt = f.top >= l.bottom - 1 && Math.abs(f.left - l.left) < 2;
                if (!sameLine && !underIt) {
                    problems.push(name(label) + ' is parted from its field ' + name(field) + ' (the field starts the next line, under something else): ' + JSON.stringify([page(l), page(f)]));
                }
            });
            // Content cut off, or scrolled sideways inside a box.
            Array.from(document.body.querySelectorAll('*')).filter(visible).forEach(function (el) {
                var style = getComputedStyle(el);
                if (style.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + 1 && !el.matches('input, textarea, select')) {
                    problems.push(name(el) + ' shows ' + el.clientWidth + ' px of its ' + el.scrollWidth + ' px wide content (overflow-x: ' + style.overflowX + '): ' + JSON.stringify([page(el.getBoundingClientRect())]));
                }
            });
            var widest = null, right = 0;
            Array.from(document.body.querySelectorAll('*')).forEach(function (el) {
                var r = el.getBoundingClientRect();
                if (r.right + scrollX > right) { right = r.right + scrollX; widest = name(el) + ' to ' + Math.round(right) + ' px'; }
            });
            return {
                url: location.href, innerWidth: innerWidth, scrollWidth: document.documentElement.scrollWidth,
                clientWidth: document.documentElement.clientWidth, scrollHeight: document.documentElement.scrollHeight,
                widest: widest, problems: problems
            };
            """
    }
}

extension Browser {
    /// Shows pages as a screen of `width` would (Chrome DevTools' device metrics, through chromedriver's
    /// `goog/cdp/execute`), until `clearEmulation`.
    fileprivate func emulate(_ width: BrowserSignInTests.ConsoleEndToEndTests.Width) async throws {
        try await connection.command(.POST, "/session/\(id)/goog/cdp/execute", [
            "cmd": "Emulation.setDeviceMetricsOverride",
            "params": ["width": .number(Double(width.pixels)), "height": .number(Double(width.height)), "deviceScaleFactor": 1, "mobile": .bool(width.mobile)],
        ])
    }

    /// Back to the window's own size.
    fileprivate func clearEmulation() async throws {
        try await connection.command(.POST, "/session/\(id)/goog/cdp/execute", ["cmd": "Emulation.clearDeviceMetricsOverride", "params": [:]])
    }
}
