// The HTTP ceiling for Benchmarks/run-web.sh: a Hummingbird 2 hello-world, nothing else.
// Usage: HelloWorld [port]   (default 8081; listens on 127.0.0.1)
import Hummingbird

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 8081 : 8081
let router = Router()
router.get("/") { _, _ in "Hello, world!" }
let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: port)))
try await app.runService()
