import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore

/// Stands between the server and the emulator as "Apple": forwards `/auth/token`, and serves the emulator's
/// key set with one more key added, so a test can sign identity tokens the server accepts as Apple's and
/// change exactly one claim (the only way to reach checks that come after the signature).
struct KeyProxy: Sendable {
    let upstream: String
    let extraKey: [String: String]

    func application(onRunning: @escaping @Sendable (Int) async -> Void) -> some ApplicationProtocol {
        let router = Router()
        router.get("auth/keys") { _, _ in
            let answer = try await HTTPClient.shared.execute(HTTPClientRequest(url: upstream + "/auth/keys"), timeout: .seconds(10))
            let body = try await answer.body.collect(upTo: 1 << 20)
            guard answer.status == .ok else { return Response(status: .init(code: Int(answer.status.code)), body: .init(byteBuffer: body)) }
            var set = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as! [String: Any]
            set["keys"] = (set["keys"] as! [Any]) + [extraKey]
            let data = try JSONSerialization.data(withJSONObject: set)
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
        router.post("auth/token") { request, _ in
            var request = request
            var forward = HTTPClientRequest(url: upstream + "/auth/token")
            forward.method = .POST
            forward.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            forward.body = .bytes(try await request.collectBody(upTo: 1 << 20))
            let answer = try await HTTPClient.shared.execute(forward, timeout: .seconds(10))
            let body = try await answer.body.collect(upTo: 1 << 20)
            return Response(status: .init(code: Int(answer.status.code)), headers: [.contentType: "application/json"], body: .init(byteBuffer: body))
        }
        return Application(
            router: router,
            configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: "apple-proxy"),
            onServerRunning: { channel in await onRunning(channel.localAddress?.port ?? 0) },
            logger: Logger(label: "test.proxy", factory: { _ in SwiftLogNoOpLogHandler() })
        )
    }
}
